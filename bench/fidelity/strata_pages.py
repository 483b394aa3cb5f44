"""KV through a real stratad: chunks stored by the connector's page store (the Python binding
of strata/page_store.h, as the SGLang backend stores them), compressed in place in the host
tier by the daemon's codec (`strata compress --tier host`, the control API's Compress), and
loaded back through the same store, which the daemon decodes for. What comes back is what an
engine would be served.

`DaemonPages` owns one daemon (tests/engines/harness.Daemon) and one PageStore on it; the
chunks' layout is the judge's model in bf16, chunk_tokens tokens per chunk, keys applied
after RoPE (prefix chunks). Not thread-safe. Close it (or use it as a context manager).
"""

import json
import pathlib
import sys

import torch

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2] / "tests" / "engines"))
import harness  # noqa: E402
import strata_connector  # noqa: E402

MODEL_ID = "smollm2-135m-instruct"
COMPRESS_TIMEOUT_MS = 600_000  # xkv's SVDs of a few hundred chunks take minutes on 2 cores


class DaemonPages:
    def __init__(self, judge, chunk_tokens, host="4GiB"):
        self.judge, self.chunk_tokens = judge, chunk_tokens
        self.daemon = harness.Daemon(host=host).start()
        options = strata_connector.PageStoreOptions()
        options.socket_path = str(self.daemon.socket)
        options.engine_id = "fidelity"
        options.model_id = MODEL_ID
        options.kv_kind = "mha"
        options.num_layers = judge.num_layers
        options.num_kv_heads = judge.num_kv_heads
        options.head_dim = judge.head_dim
        options.dtype = "bf16"
        options.positional = "rope"
        options.page_tokens = chunk_tokens
        options.io_timeout_ms = 30_000
        options.lookup_budget_ms = 5_000
        self.store = strata_connector.PageStore(options)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def close(self):
        self.store = None
        self.daemon.close()

    def _layout_flags(self):
        j = self.judge
        return ["--model", MODEL_ID, "--kind", "mha", "--layers", str(j.num_layers),
                "--kv-heads", str(j.num_kv_heads), "--head-dim", str(j.head_dim),
                "--dtype", "bf16", "--positional", "rope",
                "--chunk-tokens", str(self.chunk_tokens)]

    def put(self, keys, chunks):
        """Stores each chunk (Judge.chunk_kv) under its key; every one must be stored."""
        stored = self.store.put(keys, [[(c.data_ptr(), c.numel() * c.element_size())]
                                       for c in chunks])
        if not all(stored):
            raise RuntimeError(f"the daemon stored {sum(stored)} of {len(keys)} chunks")

    def compress(self, keys, codec, **params):
        """Compresses the chunks of `keys` in the host tier; the Compress answer as a dict
        (stored_bytes_before / _after, max errors), with "ratio": the chunks' bytes before
        over after, counting a chunk the codec would not make smaller (kept as it is) at its
        size. `params`: the CLI's codec flags, e.g. group_size=64, bits=4, energy=0.99."""
        flags = [f"--{name.replace('_', '-')}={value}" for name, value in params.items()]
        for key in keys:
            flags += ["--key", self.store.key_of(key)]
        answer = json.loads(self.daemon.cli(
            "--json", f"--timeout-ms={COMPRESS_TIMEOUT_MS}", "compress", "--tier", "host",
            "--codec", codec, *self._layout_flags(), *flags,
            timeout_s=COMPRESS_TIMEOUT_MS / 1000 + 10).stdout)
        compressed = int(answer.get("compressed_chunks", 0))
        kept = int(answer.get("not_smaller_chunks", 0))
        if compressed + kept != len(keys):
            raise RuntimeError(f"compress {codec}: {answer}")
        chunk_bytes = self.store.page_bytes
        answer["ratio"] = len(keys) * chunk_bytes / (int(answer.get("stored_bytes_after", 0))
                                                     + kept * chunk_bytes)
        return answer

    def get(self, keys):
        """The chunks of `keys` as the daemon serves them (decoded)."""
        shape = (self.judge.num_layers, 2, self.chunk_tokens, self.judge.num_kv_heads,
                 self.judge.head_dim)
        chunks = [torch.empty(shape, dtype=torch.bfloat16) for _ in keys]
        found = self.store.get(keys, [[(c.data_ptr(), c.numel() * c.element_size())]
                                      for c in chunks])
        if not all(found):
            raise RuntimeError(f"the daemon served {sum(found)} of {len(keys)} chunks")
        return chunks
