"""One vLLM engine (its offline ``LLM`` API, unmodified) in a process of its own, driven by the
engine tests one command at a time.

    $(scripts/engines-env.sh path vllm)/bin/python tests/engines/vllm_session.py CONFIG_JSON

CONFIG_JSON: ``model`` (a checkpoint directory), ``dtype``, ``prefix_caching``,
``max_model_len``, ``engine_args`` (more of LLM's arguments), and ``connector``: null (no
connector) or the StrataConnector's ``kv_connector_extra_config`` (``kv_role`` beside it, default
kv_both); or instead ``kv_transfer``, a whole KVTransferConfig (another connector).

Commands are JSON lines on stdin; each answer is one line on stdout that starts with
``STRATA-SESSION `` (vLLM logs to stdout too), the first one ``{"ready": true}`` once the engine
is up:

- ``{"op": "generate", "texts": [...], "max_tokens": N}``: greedy completions of the texts, in
  one batch: per text its prompt's token count, the completion's token ids and each completion
  token's logprob; with the engine's prefix-cache counters (vLLM's own and its connector's,
  ``vllm:external_prefix_cache_*``, in tokens) as of after the batch, and the batch's seconds;
- ``{"op": "ttft", "texts": [...]}``: each text alone, one after the other, for one token:
  the seconds each took (a lone request's time to first token);
- ``{"op": "exit"}``.
"""

import json
import os
import sys
import time

REPLY_PREFIX = "STRATA-SESSION "


def reply(message):
    sys.stdout.write(REPLY_PREFIX + json.dumps(message) + "\n")
    sys.stdout.flush()


def counters(llm):
    """vLLM's prefix-cache counters (Prometheus names), summed over engines."""
    wanted = ("vllm:prefix_cache_queries", "vllm:prefix_cache_hits",
              "vllm:external_prefix_cache_queries", "vllm:external_prefix_cache_hits")
    out = dict.fromkeys(wanted, 0)
    for metric in llm.get_metrics():
        if metric.name in out:
            out[metric.name] += int(getattr(metric, "value", 0))
    return out


def main():
    config = json.loads(sys.argv[1])
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", str(config.get("kv_cache_gib", 1)))
    from vllm import LLM, SamplingParams
    from vllm.config import KVTransferConfig

    kwargs = dict(model=config["model"], dtype=config.get("dtype", "bfloat16"),
                  enable_prefix_caching=bool(config.get("prefix_caching", False)),
                  max_model_len=int(config.get("max_model_len", 4096)), max_num_seqs=4,
                  seed=0, enforce_eager=True, disable_log_stats=False)
    kwargs.update(config.get("engine_args", {}))
    if config.get("kv_transfer") is not None:
        kwargs["kv_transfer_config"] = KVTransferConfig(**config["kv_transfer"])
    elif config.get("connector") is not None:
        kwargs["kv_transfer_config"] = KVTransferConfig(
            kv_connector="StrataConnector", kv_connector_module_path="strata_vllm",
            kv_role=config.get("kv_role", "kv_both"),
            kv_connector_extra_config=config["connector"])
    llm = LLM(**kwargs)
    tokenizer = llm.get_tokenizer()
    reply({"ready": True})
    for line in sys.stdin:
        command = json.loads(line)
        if command["op"] == "exit":
            break
        prompts = [{"prompt_token_ids": tokenizer.encode(text)} for text in command["texts"]]
        if command["op"] == "ttft":
            seconds = []
            for prompt in prompts:
                start = time.perf_counter()
                llm.generate([prompt], SamplingParams(temperature=0.0, max_tokens=1),
                             use_tqdm=False)
                seconds.append(time.perf_counter() - start)
            reply({"seconds": seconds, "counters": counters(llm)})
            continue
        if command["op"] != "generate":
            reply({"error": f"unknown op {command['op']!r}"})
            continue
        params = SamplingParams(temperature=0.0, max_tokens=int(command.get("max_tokens", 8)),
                                logprobs=1)
        start = time.perf_counter()
        results = llm.generate(prompts, params, use_tqdm=False)
        elapsed = time.perf_counter() - start
        outputs = []
        for result in results:
            completion = result.outputs[0]
            outputs.append({
                "prompt_tokens": len(result.prompt_token_ids),
                "token_ids": list(completion.token_ids),
                "logprobs": [float(step[token].logprob)
                             for token, step in zip(completion.token_ids, completion.logprobs)],
            })
        reply({"outputs": outputs, "counters": counters(llm), "seconds": elapsed})
    reply({"exited": True})


if __name__ == "__main__":
    main()
