"""The vLLM adapter serving a hybrid model (several KV-cache groups, vLLM's SupportsHMA).

A fake hybrid engine: full-attention layers 0 and 2 (2 KV heads) in group 0, sliding-window
layers 1 and 3 (1 KV head, window 32) in group 1, one block pool with vLLM's null block (id 0),
a block table per group. KV is a function of each position's token prefix, as in
test_vllm_connector, so every load is checked byte for byte against what another engine
stored. The daemon is the real engine-session server in another process.
"""

import time
import unittest
from types import SimpleNamespace

from test_vllm_connector import (
    BLOCK,
    CHUNK,
    DIM,
    NUM_BLOCKS,
    DaemonProcess,
    EngineSteps,
    FakeTensor,
    fake_vllm_config,
    idle_output,
    kv_value,
    prefix_hashes,
)
from strata_vllm import StrataConnector
from strata_vllm.vllm_types import hit_source

WINDOW = 32
# (layer names, heads) per group.
GROUP_LAYERS = [(["model.layers.0.attn", "model.layers.2.attn"], 2),
                (["model.layers.1.attn", "model.layers.3.attn"], 1)]


class FullAttentionSpec:
    def __init__(self, num_kv_heads):
        self.block_size, self.num_kv_heads, self.head_size = BLOCK, num_kv_heads, DIM
        self.dtype = "torch.bfloat16"


class SlidingWindowSpec(FullAttentionSpec):
    def __init__(self, num_kv_heads, sliding_window=WINDOW):
        super().__init__(num_kv_heads)
        self.sliding_window = sliding_window


class MambaSpec:
    block_size = BLOCK
    shapes = ((4, 4),)


def hybrid_kv_cache_config(window=WINDOW):
    specs = [FullAttentionSpec(GROUP_LAYERS[0][1]),
             SlidingWindowSpec(GROUP_LAYERS[1][1], window)]
    return SimpleNamespace(kv_cache_groups=[
        SimpleNamespace(layer_names=list(names), kv_cache_spec=spec)
        for (names, _), spec in zip(GROUP_LAYERS, specs)])


class GroupBlocks:
    """vLLM's KVCacheBlocks of a hybrid model: block ids per group."""

    def __init__(self, per_group):
        self._ids = [list(ids) for ids in per_group]

    def get_block_ids(self):
        return tuple(list(ids) for ids in self._ids)


def request_of(request_id, tokens, **fields):
    return SimpleNamespace(request_id=request_id, prompt_token_ids=list(tokens), cache_salt=None,
                           lora_request=None, num_tokens=len(tokens), kv_transfer_params=None,
                           **fields)


class HybridEngine(EngineSteps):
    """A vLLM engine with a hybrid model: scheduler- and worker-role connectors, one block
    pool shared by the groups (block 0 is the null block, never handed out)."""

    def __init__(self, vllm_config, kv_cache_config=None, seed=1):
        kv_cache_config = kv_cache_config or hybrid_kv_cache_config()
        self.scheduler = StrataConnector(vllm_config, "SCHEDULER", kv_cache_config)
        self.worker = StrataConnector(vllm_config, "WORKER", kv_cache_config)
        self.group_of, self.heads_of, self.kv = {}, {}, {}
        for group, (names, heads) in enumerate(GROUP_LAYERS):
            for name in names:
                self.group_of[name], self.heads_of[name] = group, heads
        for name in sorted(self.group_of):  # vLLM's layer order
            self.kv[name] = FakeTensor((2, NUM_BLOCKS, BLOCK, self.heads_of[name], DIM))
        self.worker.register_kv_caches(self.kv)
        self.free = list(range(1, NUM_BLOCKS))
        self.free = self.free[seed:] + self.free[:seed]
        self.metadata = []

    def allocate(self, num_tokens):
        n = (num_tokens + BLOCK - 1) // BLOCK
        blocks = []
        for _ in GROUP_LAYERS:
            blocks.append(self.free[:n])
            self.free = self.free[n:]
        return blocks

    def _slots(self, name, blocks, position, plane):
        """Element offset and length of one position of one plane, None in a null block."""
        block = blocks[self.group_of[name]][position // BLOCK]
        if block == 0:
            return None
        row = self.heads_of[name] * DIM
        base = plane * NUM_BLOCKS * BLOCK * row + (block * BLOCK + position % BLOCK) * row
        return base, row

    def compute(self, tokens, blocks, begin, end, name):
        layer = int(name.split(".")[2])
        hashes = prefix_hashes(tokens)
        buf = self.kv[name].buffer
        for p in range(begin, end):
            for plane in (0, 1):
                slots = self._slots(name, blocks, p, plane)
                if slots is not None:
                    base, row = slots
                    for e in range(row):
                        buf[base + e] = kv_value(hashes[p], layer, plane, e)

    def wrong_positions(self, tokens, blocks, begin, end):
        hashes = prefix_hashes(tokens)
        wrong = set()
        for name in self.kv:
            layer = int(name.split(".")[2])
            buf = self.kv[name].buffer
            for p in range(begin, end):
                for plane in (0, 1):
                    slots = self._slots(name, blocks, p, plane)
                    if slots is None:
                        continue
                    base, row = slots
                    if any(buf[base + e] != kv_value(hashes[p], layer, plane, e)
                           for e in range(row)):
                        wrong.add(p)
        return sorted(wrong)

    def run(self, request_id, tokens, window_nulls=0, request=None):
        """Prefills a prompt in one step, as vLLM does; the sliding-window group's first
        `window_nulls` blocks are null (vLLM allocates no block for KV outside the window).
        Returns (matched, load_async, blocks, load errors, async reports)."""
        request = request or request_of(request_id, tokens)
        matched, load_async = self.scheduler.get_num_new_matched_tokens(request, 0)
        blocks = self.allocate(len(tokens))
        blocks[1][:window_nulls] = [0] * window_nulls
        self.scheduler.update_state_after_alloc(request, GroupBlocks(blocks), matched)
        errors, reports = set(), 0
        if load_async:
            deadline = time.monotonic() + 10
            while reports == 0 and time.monotonic() < deadline:
                recving, new_errors = self.step(idle_output())
                errors |= new_errors
                reports += request_id in recving
                time.sleep(0.002)
        new = [SimpleNamespace(req_id=request_id, prompt_token_ids=list(tokens),
                               block_ids=tuple(list(b) for b in blocks),
                               num_computed_tokens=matched, lora_request=None)]
        cached = SimpleNamespace(req_ids=[], resumed_from_preemption=[], new_block_ids=[],
                                 num_computed_tokens=[])
        output = SimpleNamespace(scheduled_new_reqs=new, scheduled_cached_reqs=cached,
                                 num_scheduled_tokens={request_id: len(tokens) - matched},
                                 finished_req_ids=set())
        recving, new_errors = self.step(output, computing=(tokens, blocks, matched, len(tokens)))
        reports += request_id in recving
        errors |= new_errors
        keep, _ = self.scheduler.request_finished_all_groups(request, tuple(blocks))
        assert keep is False
        self.free += [b for group in blocks for b in group if b != 0]  # vLLM frees them
        return matched, load_async, blocks, errors, reports


class HybridModelTest(unittest.TestCase):

    def setUp(self):
        self.daemon = DaemonProcess()
        self.daemon.start()
        self.addCleanup(self.daemon.close)
        self.config = fake_vllm_config(self.daemon.socket_path)
        self.prompt = list(range(100, 170))  # 4 full chunks and 6 tokens

    def test_each_group_stores_and_loads_its_own_layers_byte_exact(self):
        a = HybridEngine(self.config)
        self.assertEqual(a.run("a", self.prompt)[:2], (0, False))
        self.assertEqual([len(n.saves) for n in a.metadata[-1].natives], [1, 1])
        b = HybridEngine(self.config, seed=11)
        matched, load_async, blocks, errors, reports = b.run("b", self.prompt)
        self.assertEqual((matched, load_async, errors, reports), (4 * CHUNK, True, set(), 1),
                         "a hybrid model's hits load asynchronously, reported once")
        self.assertEqual(b.failed_recving, set())
        self.assertEqual(b.wrong_positions(self.prompt, blocks, 0, len(self.prompt)), [])
        loads = [n.loads for n in b.metadata[0].natives]
        self.assertEqual([len(group) for group in loads], [1, 1])
        self.assertEqual([group[0]["block_ids"] for group in loads],
                         [blocks[0][:16], blocks[1][:16]])
        stats = b.worker.stats()
        self.assertEqual(stats["chunks_loaded"], 8, "4 chunks in each of 2 groups")
        self.assertTrue(stats["connected"])

    def test_groups_have_their_own_key_spaces(self):
        a = HybridEngine(self.config)
        a.run("a", self.prompt)
        # The same model served with one group (no hybrid allocator) shares no chunk with it.
        plain = StrataConnector(self.config, "SCHEDULER", None)
        self.assertEqual(plain.get_num_new_matched_tokens(request_of("p", self.prompt), 0),
                         (0, False))
        # Nor does a model whose group holds other layers.
        other = hybrid_kv_cache_config()
        other.kv_cache_groups[1].layer_names = ["model.layers.1.attn", "model.layers.5.attn"]
        moved = StrataConnector(self.config, "SCHEDULER", other)
        self.assertEqual(moved.get_num_new_matched_tokens(request_of("m", self.prompt), 0),
                         (0, False))

    def test_a_hit_is_the_shortest_of_the_groups_hits(self):
        # The first engine's sliding-window group had freed its first 5 blocks (positions
        # 0..19): it saves chunks 2 and 3 only, the full-attention group all four.
        a = HybridEngine(self.config)
        a.run("a", self.prompt, window_nulls=5)
        self.assertEqual([(s["token_begin"], s["token_end"])
                          for n in a.metadata[-1].natives for s in n.saves],
                         [(0, 64), (32, 64)])
        b = HybridEngine(self.config, seed=11)
        request = request_of("b", self.prompt)
        self.assertEqual(b.scheduler.get_num_new_matched_tokens(request, 0), (0, False),
                         "group 1 misses chunk 0, so the request has no usable hit")
        self.assertEqual(b.scheduler.stats()["lookup_hit_tokens"], 4 * CHUNK,
                         "group 0 alone would have loaded 4 chunks")

    def test_null_blocks_of_the_window_are_not_loaded(self):
        HybridEngine(self.config).run("a", self.prompt)
        b = HybridEngine(self.config, seed=11)
        # vLLM gives the sliding-window group no block for positions outside the window.
        nulls = (4 * CHUNK - WINDOW) // BLOCK
        null_block_before = [list(b.kv[n].buffer[:BLOCK * DIM]) for n in b.kv]
        matched, _, blocks, errors, _ = b.run("b", self.prompt, window_nulls=nulls)
        self.assertEqual((matched, errors), (4 * CHUNK, set()))
        self.assertEqual(b.wrong_positions(self.prompt, blocks, 0, len(self.prompt)), [])
        loads = b.metadata[0].natives[1].loads
        self.assertEqual((loads[0]["token_begin"], loads[0]["token_end"]),
                         (nulls * BLOCK, 4 * CHUNK))
        self.assertEqual([list(b.kv[n].buffer[:BLOCK * DIM]) for n in b.kv], null_block_before,
                         "nothing was written into the null block")

    def test_a_group_whose_state_is_not_kv_makes_the_connector_serve_nothing(self):
        HybridEngine(self.config).run("a", self.prompt)
        config = hybrid_kv_cache_config()
        config.kv_cache_groups[1].kv_cache_spec = MambaSpec()
        with self.assertLogs("strata_vllm", "ERROR") as logs:
            scheduler = StrataConnector(self.config, "SCHEDULER", config)
        self.assertIn("holds no per-token KV", logs.output[0])
        self.assertEqual(scheduler.get_num_new_matched_tokens(request_of("s", self.prompt), 0),
                         (0, False))
        self.assertEqual(scheduler.build_connector_meta(idle_output()).native.loads, [])
        worker = StrataConnector(self.config, "WORKER", config)
        worker.register_kv_caches(HybridEngine(self.config).kv)
        self.assertEqual(worker.get_finished(set()), (None, None))

    def test_a_window_shorter_than_a_chunk_is_refused(self):
        with self.assertLogs("strata_vllm", "ERROR") as logs:
            scheduler = StrataConnector(self.config, "SCHEDULER", hybrid_kv_cache_config(8))
        self.assertIn("sliding window of 8 tokens", logs.output[0])
        self.assertEqual(scheduler.get_num_new_matched_tokens(request_of("s", self.prompt), 0),
                         (0, False))


class HybridAsyncLoadTest(unittest.TestCase):

    def setUp(self):
        # 8 pages: the prompt's chunks go to disk, and both groups' promotions fit at once.
        self.daemon = DaemonProcess(capacity_bytes=8 * 4096, disk_bytes=4 << 20, policy="lru")
        self.daemon.start()
        self.addCleanup(self.daemon.close)
        self.config = fake_vllm_config(self.daemon.socket_path)
        self.prompt = list(range(100, 164))
        a = HybridEngine(self.config)
        a.run("a", self.prompt)
        a.run("a2", list(range(5000, 5064)))  # pushes the prompt's chunks to disk

    def test_every_group_loads_then_the_request_is_reported_once(self):
        b = HybridEngine(self.config, seed=11)
        matched, load_async, blocks, errors, reports = b.run("b", self.prompt)
        self.assertEqual((matched, load_async, errors, reports), (63, True, set(), 1))
        self.assertEqual(b.wrong_positions(self.prompt, blocks, 0, len(self.prompt)), [])
        self.assertTrue(all(n.loads[0]["async"] for n in b.metadata[0].natives
                            if n.loads))
        self.assertEqual(b.worker.stats()["async_requests_loaded"], 2, "one load per group")


class FakeGroupScheduler:
    """A group's native scheduler connector, answering a fixed match."""

    def __init__(self, match):
        self.match, self.made_async = match, []

    def get_num_new_matched_tokens(self, req_id, *args):
        return self.match

    def make_load_async(self, req_id):
        self.made_async.append(req_id)


class FakeGroupWorker:
    """A group's native worker connector, reporting fixed (finished, failed) requests."""

    def __init__(self, reports, failed=()):
        self.reports, self.failed = list(reports), list(failed) or [[] for _ in reports]

    def get_finished(self, finished):
        return [], self.reports.pop(0), self.failed.pop(0)

    def get_block_ids_with_load_errors(self):
        return [7]


class GroupAgreementTest(unittest.TestCase):
    """The rules that bind a request's groups together, on stand-in native connectors."""

    def connector(self, role):
        return StrataConnector(fake_vllm_config("/nonexistent.sock"), role,
                               hybrid_kv_cache_config())

    def test_every_hit_of_a_hybrid_model_loads_asynchronously(self):
        s = self.connector("SCHEDULER")
        s._schedulers = [FakeGroupScheduler((48, True)), FakeGroupScheduler((63, False))]
        self.assertEqual(s.get_num_new_matched_tokens(request_of("r", range(64)), 0), (48, True))
        self.assertEqual([g.made_async for g in s._schedulers], [[], ["r"]])
        self.assertEqual(s.get_external_cache_hit_sources(request_of("r", range(64)), 48),
                         {hit_source("disk"): 48})
        s._schedulers = [FakeGroupScheduler((32, False)), FakeGroupScheduler((63, False))]
        self.assertEqual(s.get_num_new_matched_tokens(request_of("h", range(64)), 0), (32, True),
                         "hits in memory too: vLLM cannot map one group's failed block back")
        self.assertEqual([g.made_async for g in s._schedulers], [["h"], ["h"]])
        self.assertEqual(s.get_external_cache_hit_sources(request_of("h", range(64)), 32),
                         {hit_source("host"): 32})
        s._schedulers = [FakeGroupScheduler((0, False)), FakeGroupScheduler((63, True))]
        self.assertEqual(s.get_num_new_matched_tokens(request_of("q", range(64)), 0), (0, False),
                         "no hit in one group: nothing to load, synchronously")

    def test_a_request_is_finished_once_every_group_reported_it(self):
        w = self.connector("WORKER")
        w._workers = [FakeGroupWorker([["r"], [], ["q"]]), FakeGroupWorker([[], ["r", "q"], []])]
        self.assertEqual(w.get_finished(set()), (None, None))
        self.assertEqual(w.get_finished(set()), (None, {"r"}))
        self.assertEqual(w.get_finished(set()), (None, {"q"}))

    def test_a_request_one_group_failed_comes_back_failed_once_every_group_reported_it(self):
        w = self.connector("WORKER")
        w._workers = [FakeGroupWorker([["r"], []], failed=[["r"], []]),
                      FakeGroupWorker([[], ["r"]])]
        first = w.get_transfer_results(set())
        self.assertEqual((first.finished_recving, first.failed_recving), (set(), set()))
        second = w.get_transfer_results(set())
        self.assertEqual((second.finished_recving, second.failed_recving), ({"r"}, {"r"}))
        self.assertEqual(w.get_block_ids_with_load_errors(), set(),
                         "vLLM raises on block errors of a model with several groups")


class EagleDrafterTest(unittest.TestCase):
    """An EAGLE-family drafter's KV at a chunk's last position depends on the next token: the
    connector serves nothing rather than load it."""

    def test_the_connector_serves_nothing_with_an_eagle_drafter(self):
        daemon = DaemonProcess()
        daemon.start()
        self.addCleanup(daemon.close)
        prompt = list(range(100, 170))
        HybridEngine(fake_vllm_config(daemon.socket_path)).run("a", prompt)
        config = fake_vllm_config(daemon.socket_path)
        config.speculative_config = SimpleNamespace(use_eagle=lambda: True)
        with self.assertLogs("strata_vllm", "ERROR") as logs:
            scheduler = StrataConnector(config, "SCHEDULER", hybrid_kv_cache_config())
        self.assertIn("EAGLE-family drafter", logs.output[0])
        self.assertEqual(scheduler.get_num_new_matched_tokens(request_of("b", prompt), 0),
                         (0, False))
        config.speculative_config = SimpleNamespace(use_eagle=lambda: False)
        plain = StrataConnector(config, "SCHEDULER", hybrid_kv_cache_config())
        self.assertEqual(plain.get_num_new_matched_tokens(request_of("c", prompt), 0),
                         (4 * CHUNK, True), "the same prompt, served without a drafter")


if __name__ == "__main__":
    unittest.main()
