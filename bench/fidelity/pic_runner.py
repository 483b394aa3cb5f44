"""A model runner that executes position-independent plans (strata/pic_connector.h) on the
judge's trained model, as an engine with Strata's fused-RoPE attention would.

`PicRunner` plans each request through a real `strata_connector.PicConnector` on a daemon with a
device pool (the host runtime: memfd memory, the same pool an engine maps through CUDA IPC),
computes the chunks it is given to write (alone, at positions 0.., keys before RoPE; LegoLink-0's
after its dummy tokens) into their pool pages and publishes them, then computes the request over
its block table: pool pages read in place, its own blocks for what its policy recomputes (filled
from their pages first where the policy recomputes part of a block). Attention runs through
transformers' pluggable attention interface: the model's layers hand it their queries, keys and
values before RoPE (the layers are given the identity rotation), and it calls Strata's CPU paged
attention kernel (strata_connector.kernels.paged_attention) over the request's own blocks and the
pool, with RoPE fused in at the plan's positions and the pad tokens masked. Tokens recomputed in
the middle of the prompt are a kernel sequence each, ending at their last one.

Pads change nothing: they are masked keys, and they take no positions. The plan places block j
of the padded prompt at j * block_tokens (MEPIC's canonical layout), which would put each chunk a
few positions later than in the prompt as given (measured: KL 0.01-0.04 against full prefill,
with every token computed, from that shift alone); the runner instead gives each block the
prompt's own position of its first real token less that token's slot, plus POSITION_OFFSET (so
that a first block with leading pads starts at a valid position: attention depends only on
the distances between positions). The runner recomputes by the plan's policy; "naive" reuse (every
shared chunk read as computed alone, nothing of it recomputed) and "full" (every token computed
over the padded prompt, nothing read from the pool) are the runner's own controls.

Not thread-safe: one request at a time (the attention function reads the runner's step).
"""

import contextlib
import ctypes
from dataclasses import dataclass

import torch
from transformers import AttentionInterface

import strata_connector
from strata_connector import kernels

ATTENTION = "strata_paged_attention"
MAX_POSITION = 16384
POSITION_OFFSET = 64  # >= a block's tokens
_ACTIVE = None  # the _Step the registered attention function serves


def _strata_attention(module, query, key, value, attention_mask, scaling=None, dropout=0.0,
                      **kwargs):
    return _ACTIVE.attend(module.layer_idx, query, key, value, scaling)


AttentionInterface.register(ATTENTION, _strata_attention)


def _tensor(x):
    """A tensor as the kernels binding takes it."""
    return (x.data_ptr(), str(x.dtype), list(x.shape), list(x.stride()))


@dataclass
class Outcome:
    logprobs: torch.Tensor  # [answer positions, vocab] fp32
    computed_tokens: int    # prompt tokens computed through the last layer (pads excluded)
    prompt_tokens: int
    plan: dict


class _Step:
    """One forward pass over a padded sequence: its block table, own KV, and computed tokens."""

    def __init__(self, runner, tokens, blocks, masked, pool, own_blocks):
        j = runner.judge
        self.runner, self.tokens, self.pool = runner, tokens, pool
        self.block = runner.block_tokens
        self.heads, self.dim = j.num_kv_heads, j.head_dim
        shape = (j.num_layers, own_blocks, self.block, self.heads, self.dim)
        self.own_k = torch.zeros(shape, dtype=j.dtype)
        self.own_v = torch.zeros(shape, dtype=j.dtype)
        self.own_blocks = own_blocks
        self.row = [own_blocks + index if in_pool else index for in_pool, index in blocks]
        self.masked = list(masked) + [0] * (len(blocks) * self.block - len(masked))
        self.positions = self.block_positions(self.masked, self.block)
        self.own_of_block = [None if in_pool else index for in_pool, index in blocks]
        self.computed = []

    @staticmethod
    def block_positions(masked, block):
        """Per block, the position of its slot 0 such that the unmasked tokens sit at their
        positions in the sequence without pads (plus POSITION_OFFSET)."""
        positions, real = [], POSITION_OFFSET
        for j in range(len(masked) // block):
            slots = masked[j * block:(j + 1) * block]
            first = next((t for t, pad in enumerate(slots) if not pad), 0)
            positions.append(real - first)
            real += block - sum(slots)
        return positions

    def own_slots(self, indices):
        """Flat own-cache rows ([own block][slot]) of token indices (all in own blocks)."""
        slots = []
        for i in indices:
            own = self.own_of_block[i // self.block]
            if own is None:
                raise RuntimeError(f"token {i} is computed but lies in a pool page")
            slots.append(own * self.block + i % self.block)
        return torch.tensor(slots, dtype=torch.long)

    def set_computed(self, indices):
        self.computed = indices
        self.slots = self.own_slots(indices)
        runs, begin = [], 0
        for n in range(1, len(indices) + 1):
            if n == len(indices) or indices[n] != indices[n - 1] + 1:
                runs.append((indices[begin], indices[n - 1] + 1))
                begin = n
        self.seq_lens = [end for _, end in runs]
        self.query_start_loc = [0]
        for b, e in runs:
            self.query_start_loc.append(self.query_start_loc[-1] + e - b)
        self.query_positions = [self.positions[i // self.block] + i % self.block for i in indices]

    def attend(self, layer, query, key, value, scaling):
        q = query[0].transpose(0, 1).contiguous()
        self.own_k[layer].view(-1, self.heads, self.dim)[self.slots] = key[0].transpose(0, 1)
        self.own_v[layer].view(-1, self.heads, self.dim)[self.slots] = value[0].transpose(0, 1)
        out = torch.empty_like(q)
        shared = self.pool.planes(layer) if self.pool is not None else (None, None)
        runs = len(self.seq_lens)
        kernels.paged_attention(
            _tensor(q), _tensor(out), _tensor(self.own_k[layer]), _tensor(self.own_v[layer]),
            self.row * runs, len(self.row), self.seq_lens, self.query_start_loc,
            self.query_positions, self.positions * runs, self.masked * runs, self.runner.rope,
            shared[0], shared[1], scaling or 0.0)
        return out.unsqueeze(0), None


class _Pool:
    """The device pool as the plan maps it: per layer, K and V planes of [page][slot][head][dim]
    (every plane of one block of one layer is one page), and a writable torch view."""

    def __init__(self, view, heads, dim, dtype):
        self.view, self.heads, self.dim, self.dtype = view, heads, dim, dtype
        self.elem = torch.empty((), dtype=dtype).element_size()
        self.plane_elems = view["block_tokens"] * heads * dim
        self.page_elems = view["page_bytes"] // self.elem
        self.layer_elems = view["layer_stride_bytes"] // self.elem
        total = view["num_layers"] * view["layer_stride_bytes"]
        memory = (ctypes.c_byte * total).from_address(view["base"])
        self.memory = torch.frombuffer(memory, dtype=dtype)

    def planes(self, layer):
        base = self.view["base"] + layer * self.view["layer_stride_bytes"]
        shape = [self.view["num_pages"], self.view["block_tokens"], self.heads, self.dim]
        strides = [self.page_elems, self.heads * self.dim, self.dim, 1]
        return ((base, str(self.dtype), shape, strides),
                (base + self.plane_elems * self.elem, str(self.dtype), shape, strides))

    def page(self, layer):
        """[page][K|V][slot][head][dim] of one layer, a view of the pool's memory."""
        return self.memory.as_strided(
            (self.view["num_pages"], 2, self.view["block_tokens"], self.heads, self.dim),
            (self.page_elems, self.plane_elems, self.heads * self.dim, self.dim, 1),
            layer * self.layer_elems)


class PicRunner:
    def __init__(self, judge, socket_path, block_tokens=16):
        self.judge, self.block_tokens = judge, block_tokens
        config = judge.model.config
        options = strata_connector.ConnectorOptions()
        options.socket_path = str(socket_path)
        options.engine_id = "fidelity-pic"
        options.model_id = "smollm2-135m-instruct"
        options.kv_kind = "mha"
        options.num_layers = judge.num_layers
        options.num_kv_heads = judge.num_kv_heads
        options.head_dim = judge.head_dim
        options.dtype = str(judge.dtype)
        options.positional = "nope"
        options.block_size = block_tokens
        options.io_timeout_ms = 30_000
        self.pad = config.pad_token_id if config.pad_token_id is not None else 0
        self.connector = strata_connector.PicConnector(options, self.pad)
        theta = (getattr(config, "rope_parameters", None) or {}).get(
            "rope_theta", getattr(config, "rope_theta", 10000.0))
        self.rope = kernels.RopeTable(judge.head_dim, theta, MAX_POSITION, "neox")
        self.requests = 0

    @contextlib.contextmanager
    def _attention(self, step):
        global _ACTIVE
        config = self.judge.model.config
        before, config._attn_implementation = config._attn_implementation, ATTENTION
        _ACTIVE = step
        try:
            yield
        finally:
            _ACTIVE = None
            config._attn_implementation = before

    @torch.no_grad()
    def _forward(self, step, computed, blend=None):
        """Runs the model's layers over the computed token indices; the final hidden states of
        the last `len(computed)` (or, with CacheBlend, of its selection) rows.

        blend: (check_layer, ratio, candidates): from check_layer on, the computed tokens are
        `computed`'s tokens outside `candidates` plus the ratio of candidates whose fresh keys
        deviate most from their cached ones (kernels/blend.h)."""
        model = self.judge.model.model
        step.set_computed(computed)
        hidden = model.embed_tokens(torch.tensor([[step.tokens[i] for i in computed]]))
        with self._attention(step):
            for layer_index, layer in enumerate(model.layers):
                if blend is not None and layer_index == blend[0]:
                    hidden = self._select(step, layer, layer_index, hidden, blend)
                n = hidden.shape[1]
                identity = (torch.ones(1, n, self.judge.head_dim, dtype=hidden.dtype),
                            torch.zeros(1, n, self.judge.head_dim, dtype=hidden.dtype))
                hidden = layer(hidden, position_embeddings=identity)
        return model.norm(hidden)

    def _select(self, step, layer, layer_index, hidden, blend):
        _, ratio, candidates = blend
        rows = {t: r for r, t in enumerate(step.computed)}
        fresh = layer.self_attn.k_proj(layer.input_layernorm(hidden))[0]
        candidate_rows = torch.tensor([rows[t] for t in candidates])
        fresh = fresh[candidate_rows].contiguous()
        cached = step.own_k[layer_index].view(-1, step.heads * step.dim)[
            step.own_slots(candidates)].contiguous()
        chosen = kernels.select_blend_tokens(_tensor(fresh), _tensor(cached), 0, ratio)
        keep = sorted(set(step.computed) - set(candidates) | {candidates[i] for i in chosen})
        step.set_computed(keep)
        return hidden[:, torch.tensor([rows[t] for t in keep])]

    def _pool(self, plan):
        return _Pool(plan["pool"], self.judge.num_kv_heads, self.judge.head_dim, self.judge.dtype)

    def write_chunks(self, plan):
        """Computes each kWrite chunk of `plan` alone into its pool pages (then publish)."""
        pool = self._pool(plan)
        dummies = plan["compile_dummies"]
        for chunk in plan["chunks"]:
            if chunk["state"] != "write":
                continue
            begin, end = chunk["padded"]
            pads = (end - begin) - (chunk["source"][1] - chunk["source"][0])
            tokens = [self.pad] * dummies + plan["padded_tokens"][begin:end]
            blocks = -(-len(tokens) // self.block_tokens)
            step = _Step(self, tokens, [(False, j) for j in range(blocks)],
                         [0] * dummies + [1] * pads + [0] * (end - begin - pads), None, blocks)
            self._forward(step, list(range(len(tokens))))
            n = end - begin
            for layer in range(self.judge.num_layers):
                page = pool.page(layer)
                for plane, own in ((0, step.own_k), (1, step.own_v)):
                    rows = own[layer].reshape(-1, step.heads, step.dim)[dummies:dummies + n]
                    for k, p in enumerate(chunk["pool_pages"]):
                        page[p, plane] = rows[k * self.block_tokens:(k + 1) * self.block_tokens]

    @torch.no_grad()
    def run(self, prompt, chunks, continuation, policy="mepic", **options):
        """The answer positions' log-probabilities for `prompt` (token ids) whose reusable
        passages are the (begin, end) spans `chunks`, teacher-forcing `continuation`.

        policy: a PicConnector policy ("mepic", "legolink", "legolink0", "cacheblend", with
        their options: legolink_tokens, check_layer, blend_ratio), or "naive" (chunks planned
        as MEPIC's, nothing of a shared chunk recomputed) or "full" (nothing read)."""
        self.requests += 1
        request_id = f"r{self.requests}"
        planned = "mepic" if policy in ("naive", "full") else policy
        plan = self.connector.begin(request_id, prompt, chunks, recompute=planned, **options)
        try:
            pool = None
            if plan["pool"] is not None:
                if any(c["state"] == "write" for c in plan["chunks"]):
                    self.write_chunks(plan)
                    plan = self.connector.publish(request_id)
                pool = self._pool(plan)
            logprobs, computed = self._request(plan, pool, continuation, policy, options)
            if not self.connector.verify(request_id):
                raise RuntimeError("the session holding the shared pages dropped")
        finally:
            self.connector.end(request_id)
        return Outcome(logprobs, computed, len(prompt), plan)

    @staticmethod
    def pad_mask(plan):
        """1 for each pad of the padded prompt: a chunk's leading pads, and a prompt segment's
        trailing ones (the last segment has none)."""
        masked = [0] * len(plan["padded_tokens"])
        padded_end = source_end = 0
        for chunk in plan["chunks"]:
            (begin, end), (source_begin, source_stop) = chunk["padded"], chunk["source"]
            segment_pads = (begin - padded_end) - (source_begin - source_end)
            masked[begin - segment_pads:begin] = [1] * segment_pads
            chunk_pads = (end - begin) - (source_stop - source_begin)
            masked[begin:begin + chunk_pads] = [1] * chunk_pads
            padded_end, source_end = end, source_stop
        return masked

    def _fill(self, step, own_index, pool, page):
        for layer in range(self.judge.num_layers):
            step.own_k[layer, own_index] = pool.page(layer)[page, 0]
            step.own_v[layer, own_index] = pool.page(layer)[page, 1]

    def _request(self, plan, pool, continuation, policy, options):
        padded = plan["padded_tokens"]
        tokens = padded + continuation[:-1]
        b = self.block_tokens
        if len(plan["block_table"]) * b < len(padded) - b:
            raise RuntimeError("a thinned chunk's table: not what this runner measures")
        masked = self.pad_mask(plan)
        if policy == "full":  # every block the request's own, nothing read from the pool
            blocks = [(False, j) for j in range(len(plan["block_table"]))]
            fills, pool = [], None
        else:
            blocks = [(entry["pool"], entry["index"]) for entry in plan["block_table"]]
            fills = [(entry["index"], entry["fill_from_page"]) for entry in plan["block_table"]
                     if not entry["pool"] and entry["fill_from_page"] is not None]
        own = sum(1 for in_pool, _ in blocks if not in_pool)
        # The continuation goes on after the padded prompt: the last own block, then new ones.
        for _ in range(len(blocks), -(-len(tokens) // b)):
            blocks.append((False, own))
            own += 1
        step = _Step(self, tokens, blocks, masked, pool, own)
        for index, page in fills:
            self._fill(step, index, pool, page)
        shared = [c for c in plan["chunks"] if c["state"] == "shared"]
        always = [i for begin, end in plan["recompute_from_layer_zero"] for i in range(begin, end)]
        tail = list(range(len(padded), len(tokens)))
        blend = None
        if policy == "full":
            computed = list(range(len(tokens)))
        elif policy == "naive":
            in_shared = set()
            for chunk in shared:
                begin, end = chunk["padded"]
                in_shared.update(range(begin, end))
                in_pool, index = blocks[begin // b]
                if not in_pool:  # MEPIC's recomputed block 1: read from its page instead
                    self._fill(step, index, pool, chunk["pool_pages"][0])
            computed = [i for i in always if i not in in_shared] + tail
        elif policy == "cacheblend":
            candidates = [i for c in shared for i in range(*c["padded"]) if not masked[i]]
            blend = (options.get("check_layer", 1), options.get("blend_ratio", 0.15), candidates)
            computed = list(range(len(tokens)))
        else:
            computed = always + tail
        hidden = self._forward(step, computed, blend)
        logits = self.judge.model.lm_head(hidden[0, -len(continuation):]).float()
        prompt_computed = sum(1 for i in step.computed if i < len(padded) and not masked[i])
        return torch.log_softmax(logits, -1), prompt_computed
