"""The real engines judge the connector: vLLM from PyPI (the engines environment that
`make engines-env` installs, scripts/engines-env.sh) runs the trained SmolLM2-135M-Instruct with
StrataConnector loaded by kv_connector_module_path against a stratad of this build.

ctest runs one entry per case (engines_test.<Class>.<case>, tests/engines/CMakeLists.txt):
`python3 engine_tests.py CASE` with Debian's python3, which runs the case under the engines
environment's interpreter. Without that environment (or with one older than its lock) every case
reports skipped, with the reason and the command that makes it.

The outputs of a run without any connector are the reference: greedy completions must be
token-identical, and their logprobs within LOGPROB_TOLERANCE (float32: a hit's attention runs
over loaded KV in another kernel path than a full prefill, which moves the last digits).
"""

import hashlib
import json
import os
import pathlib
import subprocess
import sys
import time
import unittest

HERE = pathlib.Path(__file__).resolve().parent
SOURCE = HERE.parents[1]
sys.path.insert(0, str(SOURCE / "tests" / "support"))
import python_cases  # noqa: E402
LOGPROB_TOLERANCE = 1e-3
DTYPE = "float32"
# One chunk per 128-token block (vLLM's CPU block size; its blocks are opaque pages, copied
# whole: strata_vllm.kv_views), so that hits end at many places in the prompts.
CHUNK_TOKENS = 128


def engines_env():
    """(interpreter, None) of the vLLM engines environment, or (None, why it cannot run)."""
    path = subprocess.run(["bash", str(SOURCE / "scripts" / "engines-env.sh"), "path", "vllm"],
                          capture_output=True, text=True, check=True).stdout.strip()
    venv = pathlib.Path(path)
    python = venv / "bin" / "python"
    how = "make engines-env (scripts/engines-env.sh install vllm)"
    if not python.exists():
        return None, f"no vLLM engines environment at {venv}: {how} installs it"
    lock = SOURCE / "scripts" / "engines" / "vllm.lock"
    installed = (venv / ".strata-lock").read_text().strip() if (
        venv / ".strata-lock").exists() else ""
    if installed != hashlib.sha256(lock.read_bytes()).hexdigest():
        return None, f"the engines environment at {venv} is not at {lock.name}: {how}"
    return python, None


class VllmInterface(unittest.TestCase):
    """The connector against the installed vLLM's classes, without running a model."""

    def test_the_connector_is_a_complete_connector_of_the_installed_vllm(self):
        import inspect

        from vllm.distributed.kv_transfer.kv_connector.v1.base import (
            KVConnectorBase_V1,
            SupportsHMA,
        )

        from strata_vllm import StrataConnector

        self.assertTrue(issubclass(StrataConnector, KVConnectorBase_V1))
        self.assertTrue(issubclass(StrataConnector, SupportsHMA))
        self.assertEqual(StrataConnector.__abstractmethods__, frozenset())
        base_names = {n for k in (KVConnectorBase_V1, SupportsHMA) for n in vars(k)}
        for name, member in vars(StrataConnector).items():
            if name not in base_names or not callable(getattr(StrataConnector, name)):
                continue
            with self.subTest(method=name):
                ours = inspect.signature(getattr(StrataConnector, name))
                theirs = inspect.signature(getattr(KVConnectorBase_V1, name, None) or
                                           getattr(SupportsHMA, name))
                self.assertEqual([p.name for p in ours.parameters.values()],
                                 [p.name for p in theirs.parameters.values()])

    def test_kv_views_read_each_backend_as_the_backend_does(self):
        """The stacked [2, B, N, H, D] view of a packed [B, H, N, 2D] page holds, for each
        backend, the K and V that backend's attention reads (its own view code, as in
        vllm/v1/attention/backends/)."""
        import torch

        from strata_vllm.kv_views import UnknownKvPacking, layer_views

        blocks, heads, slots, dim = 5, 3, 128, 64
        page = torch.randn(blocks, heads, slots, 2 * dim).to(torch.bfloat16)
        # CPU_ATTN (cpu_attn.py): view [B, H, 2N, D], chunk dim 2.
        stacked, v = layer_views(page, False, dim, "CPU_ATTN")
        self.assertIsNone(v)
        key, value = page.view(blocks, heads, 2 * slots, dim).chunk(2, dim=2)
        self.assertTrue(torch.equal(stacked[0], key.transpose(1, 2)))
        self.assertTrue(torch.equal(stacked[1], value.transpose(1, 2)))
        # FLASH_ATTN (flash_attn.py): transpose(1, 2), split at head_size; also over a page
        # whose physical order is [B, N, H, C] (the LBNHC layout).
        for cache in (page, torch.randn(blocks, slots, heads, 2 * dim).transpose(1, 2)):
            stacked, _ = layer_views(cache, False, dim, "FLASH_ATTN")
            key, value = cache.transpose(1, 2).split(dim, dim=-1)
            self.assertTrue(torch.equal(stacked[0], key))
            self.assertTrue(torch.equal(stacked[1], value))
            self.assertEqual(stacked.data_ptr(), cache.data_ptr(), "a view, not a copy")
        with self.assertRaisesRegex(UnknownKvPacking, "NEW_BACKEND"):
            layer_views(page, False, dim, "NEW_BACKEND")
        latent = torch.randn(blocks, 1, slots, 576)
        view, _ = layer_views(latent, True, 576, "CPU_MLA")
        self.assertEqual(tuple(view.shape), (blocks, slots, 1, 576))


class VllmOffline(unittest.TestCase):
    """vLLM's offline LLM API, unmodified, with and without StrataConnector."""

    TEXTS = None

    @classmethod
    def setUpClass(cls):
        import harness

        cls.h = harness
        cls.model = str(harness.smollm2_checkpoint())
        # Three documents (about 1,000 tokens each, not a multiple of the block size), each
        # followed by its own question.
        cls.TEXTS = [harness.document(seed) + f" Question {seed}: what does the text name "
                     "first? Answer:" for seed in (1, 2, 3)]
        cls.reference = cls.reference_outputs()

    @classmethod
    def session_config(cls, connector, **extra):
        return {"model": cls.model, "dtype": DTYPE, "connector": connector, **extra}

    @classmethod
    def reference_outputs(cls):
        """The outputs without any connector, computed once per build tree and model."""
        key = hashlib.sha256(json.dumps([cls.model, DTYPE, cls.TEXTS]).encode()).hexdigest()
        path = cls.h.BUILD / f"reference-{key[:16]}.json"
        if path.exists():
            return json.loads(path.read_text())
        session = cls.h.VllmSession(cls.session_config(None))
        try:
            outputs = session.generate(cls.TEXTS)["outputs"]
        finally:
            session.close()
        path.write_text(json.dumps(outputs))
        return outputs

    def start_daemon(self, **kwargs):
        daemon = self.h.Daemon(**kwargs).start()
        self.addCleanup(daemon.close)
        return daemon

    def start_vllm(self, daemon, **extra):
        connector = daemon.connector_config(chunk_tokens=CHUNK_TOKENS,
                                            reconnect_min_backoff_ms=10,
                                            reconnect_max_backoff_ms=200, **extra)
        session = self.h.VllmSession(self.session_config(connector))
        self.addCleanup(session.close)
        return session

    def assert_like_reference(self, outputs, what):
        for got, want in zip(outputs, self.reference):
            self.assertEqual(got["token_ids"], want["token_ids"], what)
        gap = self.h.max_logprob_gap(outputs, self.reference)
        self.assertLessEqual(gap, LOGPROB_TOLERANCE, f"{what}: logprobs differ by {gap}")

    def test_hits_are_token_identical_to_no_connector_and_counted_by_both(self):
        daemon = self.start_daemon()
        first = self.start_vllm(daemon)
        miss = first.generate(self.TEXTS)
        self.assert_like_reference(miss["outputs"], "first run (misses)")
        self.assertEqual(daemon.stats().get("hit_tokens", "0"), "0")
        hit = first.generate(self.TEXTS)
        self.assert_like_reference(hit["outputs"], "second run (hits)")
        expected = sum(o["prompt_tokens"] // CHUNK_TOKENS * CHUNK_TOKENS for o in miss["outputs"])
        self.assertEqual(int(daemon.stats()["hit_tokens"]), expected)
        external = (hit["counters"]["vllm:external_prefix_cache_hits"] -
                    miss["counters"]["vllm:external_prefix_cache_hits"])
        self.assertEqual(external, expected, "vLLM's connector counters")
        # A second engine on the same daemon, while the first still runs, hits its prompts.
        second = self.start_vllm(daemon)
        other = second.generate(self.TEXTS)
        self.assert_like_reference(other["outputs"], "second engine")
        self.assertEqual(other["counters"]["vllm:external_prefix_cache_hits"], expected)
        self.assertEqual(int(daemon.stats()["hit_tokens"]), 2 * expected)

    def test_a_killed_daemon_costs_hits_never_outputs(self):
        daemon = self.start_daemon()
        engine = self.start_vllm(daemon)
        self.assert_like_reference(engine.generate(self.TEXTS)["outputs"], "before the kill")
        # SIGKILL while a batch of hits is being served (its loads, or its saves, cut short).
        engine.start_generate(self.TEXTS, max_tokens=24)
        time.sleep(0.3)
        daemon.kill()
        cut = engine.finish_generate()
        self.assertGreater(cut["seconds"], 0.3, "the kill came while the batch ran")
        for got, want in zip(cut["outputs"], self.reference):
            self.assertEqual(got["token_ids"][:len(want["token_ids"])], want["token_ids"],
                             "the batch the kill cut into")
        self.assert_like_reference(engine.generate(self.TEXTS)["outputs"], "daemon down")
        daemon.start()  # empty: its host tier did not survive
        hits, deadline = 0, time.monotonic() + 120
        while hits == 0 and time.monotonic() < deadline:
            self.assert_like_reference(engine.generate(self.TEXTS)["outputs"], "after restart")
            hits = int(daemon.stats().get("hit_tokens", "0"))
        self.assertGreater(hits, 0, "the engine reconnected to the restarted daemon and hit")

    def test_disk_tier_hits_load_asynchronously_and_identically(self):
        # float32 KV of this model: 46 KiB per token, 5.9 MiB per chunk; a 48 MiB host tier
        # holds 8 chunks, a prompt 7 or 8: each prompt's chunks push the previous one's to disk.
        daemon = self.start_daemon(host="48MiB", disk="1GiB")
        engine = self.start_vllm(daemon)
        first = [engine.generate([text]) for text in self.TEXTS]
        self.assert_like_reference([r["outputs"][0] for r in first], "first run (misses)")
        disk = next(t for t in daemon.stats()["tiers"] if t["tier"] == "TIER_DISK")
        self.assertGreater(int(disk["chunks"]), 0, "the host tier spilled to disk")
        again = engine.generate(self.TEXTS)
        self.assert_like_reference(again["outputs"], "second run (disk hits)")
        disk = next(t for t in daemon.stats()["tiers"] if t["tier"] == "TIER_DISK")
        self.assertGreater(int(disk.get("hit_tokens", "0")), 0, "hits came from the disk tier")
        self.assertGreater(again["counters"]["vllm:external_prefix_cache_hits"],
                           first[-1]["counters"]["vllm:external_prefix_cache_hits"])


class VllmServe(unittest.TestCase):
    """`vllm serve`, vLLM's OpenAI-compatible server, with StrataConnector from its command
    line."""

    def test_the_server_hits_through_strata_with_identical_completions(self):
        import harness

        model = harness.smollm2_checkpoint()
        prompt = harness.document(4) + " Question: what does the text name first? Answer:"
        plain = harness.VllmServer(model)
        try:
            want = plain.complete(prompt)
        finally:
            plain.close()
        daemon = harness.Daemon().start()
        self.addCleanup(daemon.close)
        server = harness.VllmServer(model, daemon.connector_config(chunk_tokens=CHUNK_TOKENS))
        self.addCleanup(server.close)
        first = server.complete(prompt)
        second = server.complete(prompt)
        for got, what in ((first, "first request"), (second, "second request (hits)")):
            self.assertEqual(got[0], want[0], what)
            gap = max(abs(a - b) for a, b in zip(got[1], want[1]))
            self.assertLessEqual(gap, LOGPROB_TOLERANCE, f"{what}: logprobs differ by {gap}")
        hits = int(daemon.stats()["hit_tokens"])
        self.assertGreater(hits, 0)
        self.assertEqual(server.metric("vllm:external_prefix_cache_hits_total"), hits,
                         "the server's Prometheus counter of connector hits")


class TrainedKv(unittest.TestCase):
    """The fidelity harness (bench/fidelity) on the trained model's KV: the daemon serves it
    back exactly, and its codecs keep the model's answers within their stated bounds."""

    @classmethod
    def setUpClass(cls):
        import harness

        sys.path.insert(0, str(SOURCE / "bench" / "fidelity"))
        import corpus
        import judge
        import strata_pages

        cls.strata_pages = strata_pages
        try:
            cls.judge = judge.Judge(harness.smollm2_checkpoint())
            pool = corpus.passages(cls.judge.tokenizer, 4, 200)
        except corpus.CorpusMissing as e:
            raise unittest.SkipTest(f"no corpus: {e}")
        cls.refs = [cls.judge.reference(corpus.prompt_tokens(p, pool, cls.judge.tokenizer)[0])
                    for p in corpus.rag_prompts(pool, 2, 3)]
        cls.chunk = 128
        cls.raw = [[cls.judge.chunk_kv(r.cache, b, b + cls.chunk)
                    for b in range(0, len(r.prompt) - cls.chunk, cls.chunk)] for r in cls.refs]

    def round_trip(self, codec=None, **params):
        """(scores, Compress answer) of the prompts over their chunks served by a daemon."""
        import torch

        with self.strata_pages.DaemonPages(self.judge, self.chunk, host="1GiB") as pages:
            keys = [[f"{p}/{i}" for i in range(len(cs))] for p, cs in enumerate(self.raw)]
            pages.put([k for ks in keys for k in ks], [c for cs in self.raw for c in cs])
            answer = pages.compress([k for ks in keys for k in ks], codec, **params) \
                if codec else None
            served = [pages.get(ks) for ks in keys]
        if codec is None:
            for got, want in zip(served, self.raw):
                for g, w in zip(got, want):
                    self.assertTrue(torch.equal(g, w), "a chunk served unlike it was stored")
        scores = [self.judge.score(r, self.judge.cache_from_chunks(cs), len(cs) * self.chunk)
                  for r, cs in zip(self.refs, served)]
        return scores, answer

    def test_the_daemon_serves_the_models_kv_bit_for_bit(self):
        direct = [self.judge.score(r, self.judge.cache_from_chunks(cs), len(cs) * self.chunk)
                  for r, cs in zip(self.refs, self.raw)]
        served, _ = self.round_trip()
        self.assertEqual(served, direct)
        for score in direct:  # computing the tail apart from the prefix moves bf16 a little
            self.assertLess(score.kl, 0.005)

    def test_quantizing_codecs_keep_the_answers_within_their_bounds(self):
        for codec, max_kl, min_ratio in (("int8", 0.005, 1.8), ("kivi4", 0.05, 3.0)):
            scores, answer = self.round_trip(codec)
            kl = sum(s.kl for s in scores) / len(scores)
            self.assertLessEqual(kl, max_kl, codec)
            self.assertGreaterEqual(answer["ratio"], min_ratio, codec)
        scores, _ = self.round_trip("kivi2")
        self.assertGreater(sum(s.kl for s in scores) / len(scores), 0.05,
                           "kivi2 is judged to lose the answers; the harness would not see it")


class TrainedPic(unittest.TestCase):
    """Position-independent plans executed on the trained model (bench/fidelity/pic_runner.py):
    a daemon's device pool, a real PicConnector, Strata's paged attention kernel in the model's
    layers; float32, so that full prefill through that path is exact."""

    @classmethod
    def setUpClass(cls):
        import torch

        import harness

        sys.path.insert(0, str(SOURCE / "bench" / "fidelity"))
        import corpus
        import judge
        import pic_fidelity
        import pic_runner

        cls.compare = staticmethod(judge.compare)
        try:
            cls.judge = judge.Judge(harness.smollm2_checkpoint(), dtype=torch.float32)
            pool = corpus.passages(cls.judge.tokenizer, 4, 150)
        except corpus.CorpusMissing as e:
            raise unittest.SkipTest(f"no corpus: {e}")
        cls.daemon = harness.Daemon(toml=pic_fidelity.device_pool_toml("256MiB")).start()
        cls.runner = pic_runner.PicRunner(cls.judge, cls.daemon.socket)
        cls.cases = []
        for prompt in corpus.rag_prompts(pool, 2, 3):
            ids, spans = corpus.prompt_tokens(prompt, pool, cls.judge.tokenizer)
            cls.cases.append((cls.judge.reference(ids), spans))

    @classmethod
    def tearDownClass(cls):
        cls.daemon.close()

    def run_policy(self, case, policy, **options):
        reference, spans = case
        outcome = self.runner.run(reference.prompt, spans, reference.continuation, policy,
                                  **options)
        return self.compare(reference, outcome.logprobs), outcome

    def test_every_token_computed_through_the_kernel_is_full_prefill(self):
        for case in self.cases:
            for policy, options in (("full", {}), ("cacheblend", {"blend_ratio": 1.0}),
                                    ("legolink", {"legolink_tokens": 100_000})):
                score, outcome = self.run_policy(case, policy, **options)
                self.assertLess(score.kl, 1e-5, policy)
                self.assertEqual((score.top1, score.exact), (1.0, 1.0), policy)
                self.assertEqual(outcome.computed_tokens, outcome.prompt_tokens, policy)

    def test_shared_passages_are_read_from_the_pool_and_recomputing_helps(self):
        first, second = self.cases
        self.run_policy(first, "mepic")  # writes the first prompt's passages
        naive, naive_outcome = self.run_policy(second, "naive")
        mepic, mepic_outcome = self.run_policy(second, "mepic")
        shared = [c for c in mepic_outcome.plan["chunks"] if c["state"] == "shared"]
        self.assertGreaterEqual(len(shared), 2, "the passages the prompts share")
        self.assertGreater(mepic_outcome.computed_tokens, naive_outcome.computed_tokens)
        self.assertLess(mepic.kl, naive.kl,
                        "MEPIC's recomputed blocks move it toward full prefill")
        blend, _ = self.run_policy(second, "cacheblend", blend_ratio=0.5)
        self.assertLess(blend.kl, naive.kl)


CASES = (VllmInterface, VllmOffline, VllmServe, TrainedKv, TrainedPic)


def main(argv):
    if argv[1:] == ["--list"]:
        return python_cases.main(argv, __file__, sys.modules[__name__], CASES)
    names = argv[1:] or python_cases.case_ids(CASES)
    if os.environ.get("STRATA_IN_ENGINES_ENV") != "1":
        python, why = engines_env()
        if python is None:
            for name in names:
                python_cases.report_skip(__file__, name, why)
            return 0
        env = dict(os.environ, STRATA_IN_ENGINES_ENV="1")
        return subprocess.run([str(python), __file__, *names], env=env).returncode
    sys.path.insert(0, str(HERE))
    return python_cases.run_cases(__file__, sys.modules[__name__], names)


if __name__ == "__main__":
    sys.exit(main(sys.argv))
