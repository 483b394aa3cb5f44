"""Strata's codecs judged on a trained model's real KV: each codec compresses the KV of RAG-like
prompts (corpus.py) in a real daemon's host tier, the daemon serves it back decoded
(strata_pages.py), and the model (judge.py, SmolLM2-135M-Instruct in bf16) computes the rest of
each prompt and its answer over it. Against full prefill of the same tokens it prints, per
codec: the compression ratio the daemon measured (bf16 bytes before / after, frames included),
the KV bytes held per prompt, the prompt tokens recomputed, mean KL, top-1 agreement, the
32-token exact-match rate, and the daemon's largest relative element error; then the targets.

    make build engines-env
    PYTHONPATH=build/release/connector/python \\
      $(scripts/engines-env.sh path vllm)/bin/python bench/fidelity/codec_fidelity.py [--quick]

Rows "bf16 KV, no Strata" (the reference's own KV, the rest of the prompt recomputed over it:
the floor every row shares, from computing the tail apart) and "stored as it is" (through
the daemon, no codec) come first. The stored chunks are the prompt's whole chunks except that
its last token is always computed (the first answer position needs it).
"""

import argparse
import pathlib
import statistics
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import corpus  # noqa: E402
import judge as judge_module  # noqa: E402
import strata_pages  # noqa: E402

# (row name, codec, its CLI parameters): the operating points measured.
CODECS = [
    ("int8", "int8", {}),
    ("kivi8", "kivi8", {}),
    ("kivi4", "kivi4", {}),
    ("kivi4 g32", "kivi4", {"group_size": 32}),
    ("kivi2", "kivi2", {}),
    ("cachegen 8b", "cachegen", {"bits": 8}),
    ("cachegen 4b", "cachegen", {"bits": 4}),
    ("cachegen 2b", "cachegen", {"bits": 2}),
    ("xkv e=0.999", "xkv", {"energy": 0.999}),
    ("xkv e=0.99", "xkv", {"energy": 0.99}),
    ("xkv e=0.9", "xkv", {"energy": 0.9}),
]
TARGETS = {"int8": 0.005, "kivi8": 0.005, "kivi4": 0.05}  # mean KL, nats


def summarize(name, scores, ratio, held_bytes, recomputed, max_rel_error):
    row = {"method": name, "ratio": ratio, "held_bytes": held_bytes,
           "recomputed_tokens": recomputed,
           "kl": statistics.fmean(s.kl for s in scores),
           "top1": statistics.fmean(s.top1 for s in scores),
           "exact": statistics.fmean(s.exact for s in scores),
           "max_rel_error": max_rel_error}
    print(f"{name:<22} {ratio:>6.2f}x {held_bytes / 2**20:>8.2f} MiB {recomputed:>7.0f} "
          f"{row['kl']:>9.5f} {row['top1']:>7.1%} {row['exact']:>7.1%} "
          f"{'' if max_rel_error is None else f'{max_rel_error:.3f}':>9}", flush=True)
    return row


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--prompts", type=int, default=16)
    parser.add_argument("--pool", type=int, default=10, help="passages the prompts draw from")
    parser.add_argument("--per-prompt", type=int, default=4, help="passages per prompt")
    parser.add_argument("--passage-tokens", type=int, default=300)
    parser.add_argument("--chunk-tokens", type=int, default=256)
    parser.add_argument("--quick", action="store_true", help="4 prompts, 4 codecs")
    parser.add_argument("--only", nargs="*", help="the codec rows to run (names as printed)")
    args = parser.parse_args()
    codecs = [c for c in CODECS if c[0] in ("int8", "kivi4", "cachegen 4b", "xkv e=0.99")] \
        if args.quick else CODECS
    if args.only:
        codecs = [c for c in CODECS if c[0] in args.only]
    prompts = 4 if args.quick else args.prompts

    import harness  # the engine tests' harness: the checkpoint and the daemon binaries
    judge = judge_module.Judge(harness.smollm2_checkpoint())
    pool = corpus.passages(judge.tokenizer, args.pool, args.passage_tokens)
    refs = [judge.reference(corpus.prompt_tokens(p, pool, judge.tokenizer)[0])
            for p in corpus.rag_prompts(pool, prompts, args.per_prompt)]
    chunk = args.chunk_tokens
    spans = [[(b, b + chunk) for b in range(0, len(r.prompt) - chunk, chunk)] for r in refs]
    raw = [[judge.chunk_kv(r.cache, b, e) for b, e in s] for r, s in zip(refs, spans)]
    raw_bytes = statistics.fmean(sum(c.numel() * 2 for c in cs) for cs in raw)
    recomputed = statistics.fmean(len(r.prompt) - len(s) * chunk for r, s in zip(refs, spans))
    print(f"codec_fidelity: {judge_module.ANSWER_TOKENS}-token answers to {prompts} prompts of "
          f"{statistics.fmean(len(r.prompt) for r in refs):.0f} tokens on average "
          f"({args.per_prompt} of {args.pool} GNU manual sections), {chunk}-token chunks; "
          "model SmolLM2-135M-Instruct, bf16")
    print(f"{'method':<22} {'ratio':>7} {'KV held':>12} {'recomp':>7} {'KL':>9} {'top1':>7} "
          f"{'exact':>7} {'max rel':>9}")
    rows = [summarize("bf16 KV, no Strata",
                      [judge.score(r, judge.cache_from_chunks(cs), len(cs) * chunk)
                       for r, cs in zip(refs, raw)], 1.0, raw_bytes, recomputed, None)]
    for name, codec, params in [("stored as it is", None, {})] + codecs:
        with strata_pages.DaemonPages(judge, chunk) as pages:
            keys = [[f"{p}/{i}" for i in range(len(cs))] for p, cs in enumerate(raw)]
            flat_keys = [k for ks in keys for k in ks]
            pages.put(flat_keys, [c for cs in raw for c in cs])
            ratio, max_rel = 1.0, None
            if codec is not None:
                answer = pages.compress(flat_keys, codec, **params)
                ratio = answer["ratio"]
                max_rel = answer.get("max_relative_error", 0.0)
            scores = [judge.score(r, judge.cache_from_chunks(pages.get(ks)), len(ks) * chunk)
                      for r, ks in zip(refs, keys)]
        rows.append(summarize(name, scores, ratio, raw_bytes / ratio, recomputed, max_rel))
    print("targets (mean KL, nats):")
    for row in rows:
        bound = TARGETS.get(row["method"])
        if bound is not None:
            verdict = "met" if row["kl"] <= bound else "MISSED"
            print(f"  {row['method']:<8} KL {row['kl']:.5f} <= {bound}: {verdict}")


if __name__ == "__main__":
    main()
