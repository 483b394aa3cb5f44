"""The vLLM adapter (strata_vllm.StrataConnector) driven by a fake vLLM engine.

The fake engine calls the connector exactly as vLLM's scheduler and model runner do (scheduler
role and worker role are separate instances; the metadata is pickled between them), keeps its
paged KV in ctypes buffers in vLLM's FlashAttention layout, and "computes" KV as a function of
each position's token prefix, so a load is checked byte for byte against what another engine
stored. The daemon is the real engine-session server in another process
(connector_test_daemon, path in $STRATA_TEST_DAEMON).
"""

import ctypes
import inspect
import os
import pickle
import shutil
import signal
import socket
import subprocess
import tempfile
import textwrap
import threading
import time
import unittest
from types import SimpleNamespace

import strata_connector
from stand_in import run_with_stand_in
import strata_vllm
from strata_vllm import StrataConnector, StrataConnectorMetadata, StrataKVConnectorStats

LAYERS = 2
HEADS = 2
DIM = 8
BLOCK = 4
CHUNK = 16
NUM_BLOCKS = 64
ROW = HEADS * DIM  # elements of one token of one plane


class FakeDevice:
    type = "cpu"
    index = None


class FakeTensor:
    """A strided bf16 tensor over a ctypes buffer (what the connector reads of a torch tensor)."""

    def __init__(self, shape, fill=0xEEEE):
        self.shape = tuple(shape)
        strides, acc = [], 1
        for size in reversed(self.shape):
            strides.append(acc)
            acc *= size
        self._strides = tuple(reversed(strides))
        self.buffer = (ctypes.c_uint16 * acc)(*([fill] * acc))
        self.device = FakeDevice()

    def data_ptr(self):
        return ctypes.addressof(self.buffer)

    def stride(self):
        return self._strides


class FakeModelConfig:
    model = "fake/model"
    dtype = "torch.bfloat16"
    use_mla = False

    def get_num_layers(self, parallel_config):
        return LAYERS

    def get_num_kv_heads(self, parallel_config):
        return HEADS

    def get_head_size(self):
        return DIM


def fake_vllm_config(socket_path, kv_role="kv_both", **extra):
    options = {"socket_path": socket_path, "chunk_tokens": CHUNK, "lookup_budget_ms": 2000,
               "io_timeout_ms": 2000, "reconnect_min_backoff_ms": 10,
               "reconnect_max_backoff_ms": 20}
    options.update(extra)
    return SimpleNamespace(
        kv_transfer_config=SimpleNamespace(kv_role=kv_role, kv_connector_extra_config=options),
        model_config=FakeModelConfig(),
        cache_config=SimpleNamespace(block_size=BLOCK, cache_dtype="auto"),
        parallel_config=SimpleNamespace(tensor_parallel_size=1, rank=0))


class KVCacheBlocks:
    def __init__(self, block_ids):
        self._ids = list(block_ids)

    def get_block_ids(self):
        return (list(self._ids),)


def prefix_hashes(tokens):
    out, acc = [], 0x9E3779B9
    for i, t in enumerate(tokens):
        acc = ((acc ^ t) * 0x01000193 + i) & 0xFFFFFFFF
        out.append(acc)
    return out


def kv_value(prefix_hash, layer, plane, elem):
    x = (prefix_hash * 31 + layer * 7919 + plane * 104729 + elem * 13) & 0xFFFFFFFF
    x ^= x >> 13
    return (x * 0x5BD1E995) & 0xFFFF


class EngineSteps:
    """One engine step through both connector roles, for an engine with `scheduler`, `worker`,
    `kv` (layer name -> tensor), `metadata` (a list) and `compute(tokens, blocks, begin, end,
    layer_name)`."""

    def step(self, output, before_worker=None, computing=()):
        """One engine step: the scheduler's metadata (pickled, as between processes) through
        the worker; `computing` is (tokens, blocks, begin, end) of what the forward computes.
        Returns (finished_recving, load errors) as vLLM 0.32's model runner collects them;
        failed_recving accumulates in self.failed_recving."""
        meta = self.scheduler.build_connector_meta(output)
        meta = pickle.loads(pickle.dumps(meta))  # scheduler -> worker process
        self.metadata.append(meta)
        if before_worker:
            before_worker(meta)
        self.worker.bind_connector_metadata(meta)
        self.worker.start_load_kv(SimpleNamespace())
        for name in self.kv:
            self.worker.wait_for_layer_load(name)
            if computing:
                self.compute(*computing, name)
            self.worker.save_kv_layer(name, self.kv[name], None)
        self.worker.wait_for_save()
        results = self.worker.get_transfer_results(set(output.finished_req_ids))
        self.failed_recving = getattr(self, "failed_recving", set()) | results.failed_recving
        errors = self.worker.get_block_ids_with_load_errors()
        self.worker.clear_connector_metadata()
        return results.finished_recving, errors


class FakeEngine(EngineSteps):
    """One vLLM engine: a scheduler-role and a worker-role connector, paged KV, block pool."""

    def __init__(self, vllm_config, seed=1):
        self.scheduler = StrataConnector(vllm_config, "SCHEDULER", None)
        self.worker = StrataConnector(vllm_config, "WORKER", None)
        self.kv = {f"model.layers.{l}.self_attn": FakeTensor((2, NUM_BLOCKS, BLOCK, HEADS, DIM))
                   for l in range(LAYERS)}
        self.worker.register_kv_caches(self.kv)
        self.free = list(range(NUM_BLOCKS))
        # A different block order per engine.
        self.free = self.free[seed:] + self.free[:seed]
        self.metadata = []

    def _offset(self, blocks, position, plane):
        block, slot = blocks[position // BLOCK], position % BLOCK
        return plane * NUM_BLOCKS * BLOCK * ROW + (block * BLOCK + slot) * ROW

    def compute(self, tokens, blocks, begin, end, layer_name):
        layer = list(self.kv).index(layer_name)
        hashes = prefix_hashes(tokens)
        buf = self.kv[layer_name].buffer
        for p in range(begin, end):
            for plane in (0, 1):
                base = self._offset(blocks, p, plane)
                for e in range(ROW):
                    buf[base + e] = kv_value(hashes[p], layer, plane, e)

    def wrong_positions(self, tokens, blocks, begin, end):
        hashes = prefix_hashes(tokens)
        wrong = []
        for p in range(begin, end):
            ok = True
            for layer, name in enumerate(self.kv):
                buf = self.kv[name].buffer
                for plane in (0, 1):
                    base = self._offset(blocks, p, plane)
                    for e in range(ROW):
                        ok = ok and buf[base + e] == kv_value(hashes[p], layer, plane, e)
            if not ok:
                wrong.append(p)
        return wrong

    def wait_for_async_load(self, request_id, blocks, matched, before_worker=None):
        """vLLM's WAITING_FOR_REMOTE_KVS: empty steps until the workers report the request;
        returns the tokens to count as computed (up to the first failed block) and the errors."""
        errors, deadline = set(), time.monotonic() + 10
        while time.monotonic() < deadline:
            recving, new_errors = self.step(idle_output(), before_worker)
            before_worker = None
            errors |= new_errors
            if request_id in recving:
                failed = [i for i, b in enumerate(blocks) if b in errors]
                return (min(matched, failed[0] * BLOCK) if failed else matched), errors
            time.sleep(0.002)
        raise AssertionError(f"asynchronous load of {request_id} never reported")

    def run(self, request_id, tokens, before_worker=None, per_step=1 << 30, expect_async=None,
            kv_transfer_params=None, mm_features=()):
        """Prefills a prompt the way vLLM does; returns (matched, blocks, load errors). The
        params request_finished returned are in self.finished_params."""
        request = SimpleNamespace(request_id=request_id, prompt_token_ids=list(tokens),
                                  cache_salt=None, lora_request=None, num_tokens=len(tokens),
                                  kv_transfer_params=kv_transfer_params,
                                  mm_features=list(mm_features))
        matched, load_async = self.scheduler.get_num_new_matched_tokens(request, 0)
        if expect_async is not None:
            assert load_async is expect_async, (load_async, expect_async)
        self.last_load_async = load_async
        num_blocks = (len(tokens) + BLOCK - 1) // BLOCK
        blocks, self.free = self.free[:num_blocks], self.free[num_blocks:]
        self.scheduler.update_state_after_alloc(request, KVCacheBlocks(blocks), matched)
        computed, errors, first = matched, set(), True
        if load_async:
            computed, errors = self.wait_for_async_load(request_id, blocks, matched,
                                                        before_worker)
            before_worker = None
        while computed < len(tokens):
            scheduled = min(per_step, len(tokens) - computed)
            if first:
                new = [SimpleNamespace(req_id=request_id, prompt_token_ids=list(tokens),
                                       block_ids=(list(blocks),), num_computed_tokens=computed,
                                       lora_request=None, mm_features=list(mm_features))]
                cached = SimpleNamespace(req_ids=[], resumed_from_preemption=[],
                                         new_block_ids=[], num_computed_tokens=[])
            else:
                new = []
                cached = SimpleNamespace(req_ids=[request_id], resumed_from_preemption=[False],
                                         new_block_ids=[None], num_computed_tokens=[computed])
            first = False
            output = SimpleNamespace(scheduled_new_reqs=new, scheduled_cached_reqs=cached,
                                     num_scheduled_tokens={request_id: scheduled},
                                     finished_req_ids=set())
            recving, new_errors = self.step(output, before_worker,
                                            (tokens, blocks, computed, computed + scheduled))
            before_worker = None
            assert not recving, recving
            errors |= new_errors
            computed += scheduled
        keep, self.finished_params = self.scheduler.request_finished(request, blocks)
        assert keep is False
        assert self.worker.get_finished({request_id}) == (None, None)
        return matched, blocks, errors


def idle_output():
    """A step that schedules nothing (every request waits)."""
    return SimpleNamespace(
        scheduled_new_reqs=[], num_scheduled_tokens={}, finished_req_ids=set(),
        scheduled_cached_reqs=SimpleNamespace(req_ids=[], resumed_from_preemption=[],
                                              new_block_ids=[], num_computed_tokens=[]))


class DaemonProcess:
    """connector_test_daemon in a child process."""

    def __init__(self, capacity_bytes=64 << 20, disk_bytes=0, policy=None, node_id=None,
                 peers=(), device_pool_bytes=0):
        binary = os.environ.get("STRATA_TEST_DAEMON")
        if not binary:
            raise unittest.SkipTest("STRATA_TEST_DAEMON is not set (run through ctest)")
        self.binary = binary
        self.dir = tempfile.mkdtemp(prefix="strata-py-")
        self.socket_path = os.path.join(self.dir, "engine.sock")
        self.args = [str(capacity_bytes), "4096", str(disk_bytes), policy or "-"]
        if node_id or device_pool_bytes:
            self.args += [node_id or "-", ",".join(peers)]
        if device_pool_bytes:
            self.args.append(str(device_pool_bytes))  # a device pool (T0) of 16-token pages
        self.proc = None

    def start(self):
        self.proc = subprocess.Popen([self.binary, self.socket_path] + self.args,
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE)
        line = self.proc.stdout.readline()
        if line.strip() != b"ready":
            raise RuntimeError(f"test daemon did not start: {line!r}")

    def stop(self):
        if self.proc is not None:
            self.proc.stdin.close()
            self.proc.wait(timeout=30)
            self.proc.stdout.close()
            self.proc = None

    def close(self):
        self.stop()
        shutil.rmtree(self.dir, ignore_errors=True)


def blocks_of(blocks, begin, end):
    return set(blocks[begin // BLOCK:(end + BLOCK - 1) // BLOCK])


class VllmConnectorTest(unittest.TestCase):

    def setUp(self):
        self.daemon = DaemonProcess()
        self.daemon.start()

    def tearDown(self):
        self.daemon.close()

    def config(self, **extra):
        return fake_vllm_config(self.daemon.socket_path, **extra)

    def test_cold_store_then_warm_load_is_byte_exact(self):
        prompt = list(range(100, 170))  # 4 full chunks and 6 tokens
        a = FakeEngine(self.config())
        matched, blocks, errors = a.run("a", prompt)
        self.assertEqual(matched, 0)
        self.assertEqual(errors, set())
        self.assertEqual(a.worker.stats()["chunks_saved"], 4)

        b = FakeEngine(self.config(), seed=7)
        matched, blocks, errors = b.run("b", prompt)
        self.assertEqual(matched, 64)
        self.assertEqual(errors, set())
        self.assertEqual(b.wrong_positions(prompt, blocks, 0, 70), [])
        self.assertEqual(b.worker.stats()["chunks_loaded"], 4)
        loads = b.metadata[0].native.loads
        self.assertEqual(len(loads), 1)
        self.assertEqual((loads[0]["token_begin"], loads[0]["token_end"]), (0, 64))

    def test_full_prompt_hit_leaves_one_token_and_partial_prefixes_hit(self):
        prompt = list(range(7, 7 + 48))
        FakeEngine(self.config()).run("a", prompt)
        b = FakeEngine(self.config(), seed=3)
        matched, blocks, errors = b.run("b", prompt)
        self.assertEqual(matched, 47)
        self.assertEqual(b.wrong_positions(prompt, blocks, 0, 48), [])
        other = prompt[:20] + [1] * 28  # shares chunk 0 only
        matched, blocks, errors = b.run("c", other)
        self.assertEqual(matched, 16)
        self.assertEqual(errors, set())
        self.assertEqual(b.wrong_positions(other, blocks, 0, 48), [])

    def test_chunked_prefill_through_cached_requests(self):
        prompt = list(range(500, 548))
        a = FakeEngine(self.config())
        a.run("a", prompt, per_step=20)
        self.assertEqual([len(m.native.saves) for m in a.metadata], [1, 1, 1])
        self.assertEqual(a.worker.stats()["chunks_saved"], 3)
        b = FakeEngine(self.config(), seed=11)
        matched, blocks, errors = b.run("b", prompt)
        self.assertEqual(matched, 47)
        self.assertEqual(b.wrong_positions(prompt, blocks, 0, 48), [])

    def test_daemon_gone_between_lookup_and_load_reports_failed_blocks(self):
        prompt = list(range(900, 964))
        FakeEngine(self.config()).run("a", prompt)
        b = FakeEngine(self.config(), seed=5)
        matched, blocks, errors = b.run("b", prompt,
                                        before_worker=lambda meta: self.daemon.stop())
        self.assertEqual(matched, 63)
        self.assertEqual(errors, blocks_of(blocks, 0, 63))
        # With the daemon away the engine keeps going: no hits, no errors, no exceptions.
        matched, blocks, errors = b.run("c", list(range(40)))
        self.assertEqual((matched, errors), (0, set()))
        self.assertEqual(b.wrong_positions(list(range(40)), blocks, 0, 40), [])
        # A new daemon (empty): the connectors find it by themselves after the backoff.
        self.daemon.start()
        time.sleep(0.1)
        FakeEngine(self.config(), seed=9).run("d", prompt)
        matched, blocks, errors = b.run("e", prompt)
        self.assertEqual((matched, errors), (63, set()))
        self.assertEqual(b.wrong_positions(prompt, blocks, 0, 64), [])

    def test_producer_and_consumer_roles(self):
        prompt = list(range(64))
        producer = FakeEngine(self.config(kv_role="kv_producer"))
        producer.run("p", prompt)
        matched, _, _ = producer.run("p2", prompt)
        self.assertEqual(matched, 0, "a producer never loads")
        consumer = FakeEngine(self.config(kv_role="kv_consumer"), seed=2)
        matched, blocks, errors = consumer.run("c", prompt)
        self.assertEqual(matched, 63)
        self.assertEqual(consumer.wrong_positions(prompt, blocks, 0, 64), [])
        consumer.run("c2", list(range(1000, 1064)))
        self.assertEqual(consumer.worker.stats()["chunks_saved"], 0)


class PrefetchTest(unittest.TestCase):
    """A daemon whose host tier holds four chunks, over a disk tier."""

    def setUp(self):
        self.daemon = DaemonProcess(capacity_bytes=4 * 4096, disk_bytes=4 << 20, policy="lru")
        self.daemon.start()
        self.addCleanup(self.daemon.close)

    def test_prefetch_of_a_queued_request_then_its_load(self):
        config = fake_vllm_config(self.daemon.socket_path)
        prompt = list(range(100, 164))  # 4 chunks
        a = FakeEngine(config)
        a.run("a", prompt)
        a.run("a2", list(range(5000, 5064)))  # pushes the prompt's chunks to disk

        b = FakeEngine(config, seed=7)
        queued = SimpleNamespace(request_id="b", prompt_token_ids=list(prompt), cache_salt=None,
                                 lora_request=None)
        self.assertEqual(b.scheduler.prefetch(queued), 4)
        matched, blocks, errors = b.run("b", prompt)
        self.assertEqual((matched, errors), (63, set()))
        self.assertEqual(b.wrong_positions(prompt, blocks, 0, 64), [])
        stats = b.scheduler.stats()
        self.assertEqual((stats["prefetches"], stats["prefetch_failures"],
                          stats["prefetch_chunks"]), (1, 0, 4))
        self.assertEqual(b.worker.prefetch(queued), 0, "the worker role does not prefetch")

    def test_prefetch_is_a_hint_that_never_raises(self):
        directory = tempfile.TemporaryDirectory(prefix="strata-py-")
        self.addCleanup(directory.cleanup)
        absent = FakeEngine(fake_vllm_config(os.path.join(directory.name, "absent.sock"),
                                             lookup_budget_ms=20))
        queued = SimpleNamespace(request_id="q", prompt_token_ids=list(range(64)),
                                 cache_salt="salt", lora_request=None)
        self.assertEqual(absent.scheduler.prefetch(queued), 0)
        self.assertEqual(absent.scheduler.stats()["prefetch_failures"], 1)
        # Nothing on disk for it: answered, nothing queued.
        engine = FakeEngine(fake_vllm_config(self.daemon.socket_path))
        self.assertEqual(engine.scheduler.prefetch(queued), 0)
        self.assertEqual(engine.scheduler.stats()["prefetch_failures"], 0)


class AsyncLoadTest(unittest.TestCase):
    """Hits the daemon holds on its disk load between steps (vLLM's asynchronous loads)."""

    def setUp(self):
        self.daemon = DaemonProcess(capacity_bytes=4 * 4096, disk_bytes=4 << 20, policy="lru")
        self.daemon.start()
        self.addCleanup(self.daemon.close)
        self.config = fake_vllm_config(self.daemon.socket_path)
        self.prompt = list(range(100, 164))  # 4 chunks
        a = FakeEngine(self.config)
        a.run("a", self.prompt)
        a.run("a2", list(range(5000, 5064)))  # pushes the prompt's chunks to disk

    def test_a_disk_hit_loads_asynchronously_and_byte_exact(self):
        b = FakeEngine(self.config, seed=7)
        matched, blocks, errors = b.run("b", self.prompt, expect_async=True)
        self.assertEqual((matched, errors), (63, set()))
        self.assertEqual(b.wrong_positions(self.prompt, blocks, 0, 64), [])
        self.assertTrue(b.metadata[0].native.loads[0]["async"])
        stats = b.worker.stats()
        self.assertEqual((stats["async_requests_loaded"], stats["async_requests_in_flight"]),
                         (1, 0))
        self.assertEqual(stats["chunks_loaded"], 4)
        self.assertEqual(b.scheduler.stats()["async_loads_offered"], 1)
        # Now in the host tier: the same prompt hits synchronously.
        matched, blocks, errors = b.run("b2", self.prompt, expect_async=False)
        self.assertEqual((matched, errors), (63, set()))
        self.assertEqual(b.wrong_positions(self.prompt, blocks, 0, 64), [])

    def test_async_loads_can_be_turned_off(self):
        b = FakeEngine(fake_vllm_config(self.daemon.socket_path, async_loads=False), seed=3)
        matched, blocks, errors = b.run("b", self.prompt, expect_async=False)
        self.assertEqual((matched, errors), (63, set()))
        self.assertEqual(b.wrong_positions(self.prompt, blocks, 0, 64), [])

    def test_daemon_gone_before_an_async_load_reports_the_request_and_its_blocks(self):
        b = FakeEngine(self.config, seed=5)
        matched, blocks, errors = b.run("b", self.prompt, expect_async=True,
                                        before_worker=lambda meta: self.daemon.stop())
        self.assertEqual(errors, blocks_of(blocks, 0, 63))
        self.assertEqual(matched, 63, "offered; then recomputed from the first failed block")
        self.assertEqual(b.wrong_positions(self.prompt, blocks, 0, 64), [])
        self.assertEqual(b.worker.stats()["async_requests_in_flight"], 0)

    def test_an_aborted_waiting_request_is_still_reported(self):
        b = FakeEngine(self.config, seed=9)
        request = SimpleNamespace(request_id="gone", prompt_token_ids=list(self.prompt),
                                  cache_salt=None, lora_request=None, num_tokens=64)
        matched, load_async = b.scheduler.get_num_new_matched_tokens(request, 0)
        self.assertEqual((matched, load_async), (63, True))
        b.scheduler.update_state_after_alloc(request, KVCacheBlocks(list(range(16))), matched)
        # Aborted before the step that would send the load: it goes out failed, and is reported.
        self.assertEqual(b.scheduler.request_finished(request, list(range(16))), (False, None))
        finished = idle_output()
        finished.finished_req_ids = {"gone"}
        recving, errors = b.step(finished)
        deadline = time.monotonic() + 10
        while "gone" not in recving and time.monotonic() < deadline:
            time.sleep(0.002)
            recving, more = b.step(idle_output())
            errors |= more
        self.assertIn("gone", recving)
        self.assertEqual(errors, set(range(16)))


class DisaggregatedPrefillTest(unittest.TestCase):
    """vLLM's PD flow through kv_transfer_params (NixlConnector's shape), against a daemon that
    plays node "node-p" and admits peer "node-q" (the two-daemon path over UCX is
    remote_peers_test's PrefillOnOneNodeDecodeOnAnother)."""

    def setUp(self):
        self.daemon = DaemonProcess(node_id="node-p", peers=["node-q"])
        self.daemon.start()
        self.addCleanup(self.daemon.close)
        self.prompt = list(range(700, 770))  # four full chunks and six tokens

    def test_the_prefiller_names_its_node_and_the_decoder_loads_the_whole_prompt(self):
        prefiller = FakeEngine(fake_vllm_config(self.daemon.socket_path, kv_role="kv_producer"))
        prefiller.run("p", self.prompt, kv_transfer_params={"do_remote_decode": True})
        self.assertEqual(prefiller.finished_params, {
            "do_remote_prefill": True, "do_remote_decode": False, "remote_engine_id": "node-p",
            "remote_host": "127.0.0.1", "remote_port": 7100, "remote_block_ids": []})
        self.assertEqual(prefiller.worker.stats()["chunks_saved"], 5, "the partial chunk too")
        self.assertEqual({save["hold_ms"] for save in prefiller.metadata[0].native.saves},
                         {30000}, "held for the decoder")

        decoder = FakeEngine(fake_vllm_config(self.daemon.socket_path, kv_role="kv_consumer"),
                             seed=4)
        matched, blocks, errors = decoder.run("d", self.prompt, expect_async=True,
                                              kv_transfer_params=prefiller.finished_params)
        self.assertEqual((matched, errors), (69, set()), "every token but the last")
        self.assertEqual(decoder.wrong_positions(self.prompt, blocks, 0, 70), [])
        self.assertIsNone(decoder.finished_params)
        # Without params the same prompt is an ordinary hit (no partial chunk).
        matched, _, _ = decoder.run("d2", self.prompt)
        self.assertEqual(matched, 64)

    def test_a_decoder_naming_an_unknown_node_recomputes(self):
        FakeEngine(fake_vllm_config(self.daemon.socket_path)).run(
            "p", self.prompt, kv_transfer_params={"do_remote_decode": True})
        decoder = FakeEngine(fake_vllm_config(self.daemon.socket_path), seed=2)
        params = {"do_remote_prefill": True, "remote_engine_id": "nobody"}
        matched, blocks, errors = decoder.run("d", self.prompt, expect_async=False,
                                              kv_transfer_params=params)
        self.assertEqual((matched, errors), (0, set()))
        self.assertEqual(decoder.wrong_positions(self.prompt, blocks, 0, 70), [])
        self.assertEqual(decoder.scheduler.stats()["unknown_sources"], 1)
        # An admitted peer is a known source (the KV is not there: nothing to load).
        params["remote_engine_id"] = "node-q"
        matched, _, _ = decoder.run("d2", list(range(9000, 9070)), kv_transfer_params=params)
        self.assertEqual(matched, 0)
        self.assertEqual(decoder.scheduler.stats()["unknown_sources"], 1)

    def test_malformed_params_are_logged_and_the_request_recomputes(self):
        FakeEngine(fake_vllm_config(self.daemon.socket_path)).run("seed", self.prompt)
        decoder = FakeEngine(fake_vllm_config(self.daemon.socket_path), seed=6)
        for params in ("not a dict", {"do_remote_prefill": "yes"},
                       {"do_remote_prefill": True},
                       {"do_remote_prefill": True, "remote_engine_id": 5},
                       {"do_remote_prefill": True, "remote_engine_id": "node-p",
                        "remote_port": 70000},
                       {"do_remote_prefill": True, "do_remote_decode": True,
                        "remote_engine_id": "node-p"},
                       {"do_remote_decode": True, "decode_engine_id": 7}):
            with self.subTest(params=params):
                request = SimpleNamespace(request_id="m", prompt_token_ids=list(self.prompt),
                                          cache_salt=None, lora_request=None,
                                          kv_transfer_params=params)
                with self.assertLogs("strata_vllm", "ERROR") as logs:
                    self.assertEqual(
                        decoder.scheduler.get_num_new_matched_tokens(request, 0), (0, False))
                self.assertIn("malformed kv_transfer_params", logs.output[0])
                self.assertEqual(decoder.scheduler.request_finished(request, []), (False, None))

    def test_a_prefiller_without_a_remote_tier_hands_no_params(self):
        plain = DaemonProcess()
        plain.start()
        self.addCleanup(plain.close)
        prefiller = FakeEngine(fake_vllm_config(plain.socket_path, kv_role="kv_producer"))
        with self.assertLogs("strata_vllm", "WARNING") as logs:
            prefiller.run("p", self.prompt, kv_transfer_params={"do_remote_decode": True})
        self.assertIsNone(prefiller.finished_params)
        self.assertIn("no remote tier", logs.output[0])


class NoDaemonTest(unittest.TestCase):

    def test_lookups_report_zero_at_once_and_steps_run_clean(self):
        directory = tempfile.TemporaryDirectory(prefix="strata-py-")
        self.addCleanup(directory.cleanup)
        path = os.path.join(directory.name, "absent.sock")
        engine = FakeEngine(fake_vllm_config(path, lookup_budget_ms=20))
        start = time.monotonic()
        matched, blocks, errors = engine.run("r", list(range(64)))
        self.assertLess(time.monotonic() - start, 2.0)
        self.assertEqual((matched, errors), (0, set()))
        self.assertFalse(engine.scheduler.stats()["connected"])


class AdapterShapeTest(unittest.TestCase):

    def test_options_from_vllm_config(self):
        config = fake_vllm_config("/tmp/x.sock", hash_algorithm="sha256_cbor", hash_seed="42")
        config.parallel_config = SimpleNamespace(tensor_parallel_size=4, rank=6)
        worker = strata_vllm.options_from_vllm_config(config, strata_vllm.WORKER)
        self.assertEqual((worker.num_layers, worker.num_kv_heads, worker.head_dim),
                         (LAYERS, HEADS, DIM))
        self.assertEqual((worker.tp_rank, worker.tp_world_size), (2, 4))
        self.assertEqual(worker.dtype, "bf16")
        self.assertEqual(worker.block_size, BLOCK)
        self.assertEqual(worker.chunk_tokens, CHUNK)
        self.assertEqual(worker.hash_algorithm, "sha256_cbor")
        self.assertEqual(worker.model_id, "fake/model")
        scheduler = strata_vllm.options_from_vllm_config(config, strata_vllm.SCHEDULER)
        self.assertEqual(scheduler.tp_rank, 0)
        config.cache_config.cache_dtype = "fp8"
        self.assertEqual(strata_vllm.options_from_vllm_config(config, 1).dtype, "fp8_e4m3")
        bad = fake_vllm_config("/tmp/x.sock", no_such_option=1)
        with self.assertRaises(ValueError):
            strata_vllm.options_from_vllm_config(bad, strata_vllm.WORKER)
        with self.assertRaises(ValueError):
            StrataConnector(fake_vllm_config("/tmp/x.sock"), "driver", None)

    def test_dtype_names_come_from_core(self):
        for name in ("bf16", "bfloat16", "torch.bfloat16", "BF16"):
            self.assertEqual(strata_connector.canonical_dtype(name), "bf16")
        self.assertEqual(strata_connector.canonical_dtype("torch.half"), "fp16")
        self.assertEqual(strata_connector.canonical_dtype("fp8"), "fp8_e4m3")
        with self.assertRaisesRegex(ValueError, "unknown dtype 'float64'.*bf16 \\(bfloat16"):
            strata_connector.canonical_dtype("float64")

    def test_metadata_pickles(self):
        meta = StrataConnectorMetadata()
        again = pickle.loads(pickle.dumps(meta))
        self.assertIsInstance(again, StrataConnectorMetadata)
        self.assertEqual(again.native, meta.native)
        with self.assertRaises(ValueError):
            strata_connector.ConnectorMetadata.deserialize(b"not metadata")

    def test_binding_errors_are_exceptions(self):
        options = strata_connector.ConnectorOptions()
        with self.assertRaises(ValueError):
            strata_connector.SchedulerConnector(options)  # no socket path, no layout
        options.socket_path = "/tmp/x.sock"
        options.model_id, options.num_layers, options.num_kv_heads, options.head_dim = (
            "m", 2, 2, 8)
        options.dtype = "float64"
        with self.assertRaises(ValueError):
            options.validate()
        options.dtype = "float16"
        options.validate()
        options.dtype, options.kv_kind = "torch.BFloat16", "gqa"
        options.positional = "rope_applied"
        options.validate()
        scheduler = strata_connector.SchedulerConnector(options)
        with self.assertRaises(strata_connector.StrataError):
            scheduler.update_state_after_alloc("unknown", [1, 2], 16)


# KVConnectorBase_V1's methods and their parameters (self excluded), as the installed vLLM
# 0.32.0 defines them (vllm/distributed/kv_transfer/kv_connector/v1/base.py; the engine tests
# check the installed class itself). "*" marks a classmethod, "**kwargs" a catch-all.
VLLM_BASE_METHODS = {
    "__init__": ["vllm_config", "role", "kv_cache_config"],
    "get_mem_pool_context": [],
    "bind_connector_metadata": ["connector_metadata"],
    "clear_connector_metadata": [],
    "has_connector_metadata": [],
    "register_kv_caches": ["kv_caches"],
    "set_host_xfer_buffer_ops": ["copy_operation"],
    "finish_forward": [],
    "reset_capture_state": [],
    "handle_preemptions": ["kv_connector_metadata"],
    "start_load_kv": ["forward_context", "**kwargs"],
    "wait_for_layer_load": ["layer_name"],
    "save_kv_layer": ["layer_name", "kv_layer", "attn_metadata", "**kwargs"],
    "wait_for_save": [],
    "get_finished": ["finished_req_ids"],
    "get_transfer_results": ["finished_req_ids"],
    "get_block_ids_with_load_errors": [],
    "shutdown": [],
    "get_kv_connector_stats": [],
    "get_kv_connector_kv_cache_events": [],
    "get_handshake_metadata": [],
    "build_connector_worker_meta": [],
    "bind_kv_cache_manager": ["kv_cache_manager"],
    "bind_gpu_block_pool": ["gpu_block_pool"],
    "get_loaded_kv_cache_group_ids": ["request"],
    "get_num_new_matched_tokens": ["request", "num_computed_tokens"],
    "get_external_cache_hit_sources": ["request", "num_external_tokens"],
    "update_state_after_alloc": ["request", "blocks", "num_external_tokens"],
    "build_connector_meta": ["scheduler_output"],
    "on_new_request": ["request"],
    "update_connector_output": ["connector_output"],
    "request_finished": ["request", "block_ids"],
    "register_finished_partial_tail": ["request", "block_ids", "partial_tail_offloads"],
    "take_events": [],
    "has_pending_block_frees": [],
    "has_pending_push_work": [],
    "get_required_kvcache_layout": ["*", "vllm_config"],
    "requires_piecewise_for_cudagraph": ["*", "extra_config"],
    "get_finished_count": [],
    "build_kv_connector_stats": ["*", "data"],
    "set_xfer_handshake_metadata": ["metadata"],
    "set_xfer_handshake_metadata_pp_aware": ["metadata"],
    "build_prom_metrics": ["*", "vllm_config", "metric_types", "labelnames",
                           "per_engine_labelvalues"],
    "reset_cache": [],
    # SupportsHMA, in the same module.
    "request_finished_all_groups": ["request", "block_ids"],
}
VLLM_BASE_PROPERTIES = ["requires_kv_delivery", "role"]
# Abstract in the base: vLLM cannot instantiate a connector that lacks one.
VLLM_ABSTRACT_METHODS = ["start_load_kv", "wait_for_layer_load", "save_kv_layer", "wait_for_save",
                         "get_num_new_matched_tokens", "update_state_after_alloc",
                         "build_connector_meta"]


def write_vllm_stand_in(root):
    """A vllm package with the base module's classes as the table above describes them (vLLM
    itself cannot be installed here): KVConnectorBase_V1 with its abstract methods,
    KVConnectorMetadata, and the metrics module's KVConnectorStats."""
    v1 = os.path.join(root, "vllm", "distributed", "kv_transfer", "kv_connector", "v1")
    os.makedirs(v1)
    for d in ("vllm", "vllm/distributed", "vllm/distributed/kv_transfer",
              "vllm/distributed/kv_transfer/kv_connector",
              "vllm/distributed/kv_transfer/kv_connector/v1"):
        open(os.path.join(root, d, "__init__.py"), "w").close()
    abstract = "".join(f"    @abstractmethod\n    def {name}(self, *args, **kwargs):\n"
                       f"        raise NotImplementedError\n"
                       for name in VLLM_ABSTRACT_METHODS)
    with open(os.path.join(v1, "base.py"), "w") as f:
        f.write("from abc import ABC, abstractmethod\n\n"
                "class KVConnectorMetadata(ABC):\n    pass\n\n"
                "class SupportsHMA(ABC):\n"
                "    @abstractmethod\n"
                "    def request_finished_all_groups(self, request, block_ids):\n"
                "        raise NotImplementedError\n\n"
                "class KVConnectorBase_V1(ABC):\n"
                "    def __init__(self, vllm_config, role, kv_cache_config):\n"
                "        self._connector_metadata = None\n"
                "        self._vllm_config = vllm_config\n"
                "        self._kv_transfer_config = vllm_config.kv_transfer_config\n"
                "        self._kv_cache_config = kv_cache_config\n"
                "        self._role = role\n"
                "        self.base_initialized = True\n" + abstract)
    with open(os.path.join(v1, "metrics.py"), "w") as f:
        f.write("from dataclasses import dataclass, field\n\n"
                "@dataclass\nclass KVConnectorStats:\n"
                "    data: dict = field(default_factory=dict)\n")


class VllmConformanceTest(unittest.TestCase):

    def test_every_method_it_defines_has_the_base_parameters(self):
        """Each base method the connector defines (every abstract one must be) takes the
        base's parameters; the rest come from vLLM's base class."""
        own = {name for klass in StrataConnector.__mro__ if klass.__module__.startswith(
            "strata_vllm") for name in vars(klass)}
        for name in VLLM_ABSTRACT_METHODS:
            self.assertIn(name, own)
        for name, params in VLLM_BASE_METHODS.items():
            if name not in own:
                continue
            with self.subTest(method=name):
                member = inspect.getattr_static(StrataConnector, name)
                is_classmethod = isinstance(member, classmethod)
                self.assertEqual(is_classmethod, params[:1] == ["*"], name)
                expected = [p for p in params if p != "*"]
                signature = inspect.signature(getattr(StrataConnector, name))
                got = []
                for p in signature.parameters.values():
                    if p.name == "self":
                        continue
                    got.append("**kwargs" if p.kind is p.VAR_KEYWORD else p.name)
                self.assertEqual(got, expected, name)
        for name in VLLM_BASE_PROPERTIES:
            self.assertIsInstance(inspect.getattr_static(StrataConnector, name), property, name)

    def test_vllm_loads_it_by_module_path_and_class_name(self):
        """What KVConnectorFactory does with kv_connector_module_path / kv_connector, in a
        process where a vllm package is importable."""
        root = tempfile.mkdtemp(prefix="strata-vllm-stand-in-")
        self.addCleanup(shutil.rmtree, root, True)
        write_vllm_stand_in(root)
        script = textwrap.dedent("""
            import importlib, sys
            from vllm.distributed.kv_transfer.kv_connector.v1.base import (
                KVConnectorBase_V1, KVConnectorMetadata)
            from vllm.distributed.kv_transfer.kv_connector.v1.metrics import KVConnectorStats
            import test_vllm_connector as t
            cls = getattr(importlib.import_module("strata_vllm"), "StrataConnector")
            from vllm.distributed.kv_transfer.kv_connector.v1.base import SupportsHMA
            assert issubclass(cls, KVConnectorBase_V1), cls.__mro__
            assert issubclass(cls, SupportsHMA), cls.__mro__
            import strata_vllm
            assert strata_vllm.VLLM_AVAILABLE
            config = t.fake_vllm_config("/nonexistent/engine.sock", lookup_budget_ms=20)
            scheduler = cls(config, "SCHEDULER", None)
            assert scheduler.base_initialized
            request = t.SimpleNamespace(request_id="r", prompt_token_ids=[1] * 40,
                                        cache_salt=None, lora_request=None)
            assert scheduler.get_num_new_matched_tokens(request, 0) == (0, False)
            meta = scheduler.build_connector_meta(t.idle_output())
            assert isinstance(meta, KVConnectorMetadata), type(meta).__mro__
            stats = cls.build_kv_connector_stats({"chunks_loaded": 3})
            assert isinstance(stats, KVConnectorStats)
            assert stats.reduce() == {"chunks_loaded": 3}
            worker = cls(config, "WORKER", None)
            worker.shutdown()
            print("loaded", cls.__name__)
            """)
        result = run_with_stand_in(root, script)
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertIn("loaded StrataConnector", result.stdout)

    def test_duck_typed_without_vllm(self):
        self.assertFalse(strata_vllm.VLLM_AVAILABLE, "vLLM is not installed in this environment")
        self.assertEqual(StrataConnector.__bases__, (object,))
        self.assertTrue(StrataConnector.requires_piecewise_for_cudagraph({}))
        self.assertIsNone(StrataConnector.get_required_kvcache_layout(None))


class GarbageServer:
    """A Unix socket that answers every connection with bytes that are not the engine
    protocol, for as long as it runs."""

    def __init__(self, path):
        self.path = path
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.bind(path)
        self.sock.listen(8)
        self.sock.settimeout(0.1)
        self.stopping = False
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self):
        while not self.stopping:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                continue
            with conn:
                conn.settimeout(0.5)
                try:
                    conn.recv(65536)
                    conn.sendall(b"\xff\x00garbage" * 64)
                except OSError:
                    pass

    def close(self):
        self.stopping = True
        self.thread.join(timeout=5)
        self.sock.close()


class NeverTakesTheEngineDownTest(unittest.TestCase):
    """Every public method against a daemon that answers garbage, or was killed, returns its
    documented fallback."""

    def setUp(self):
        self.daemon = DaemonProcess()
        self.daemon.start()
        self.addCleanup(self.daemon.close)
        self.prompt = list(range(300, 364))
        FakeEngine(fake_vllm_config(self.daemon.socket_path)).run("seed", self.prompt)

    def planned_load(self, blocks):
        """Metadata with a load of the prompt's hit, planned by a scheduler of the real daemon."""
        scheduler = FakeEngine(fake_vllm_config(self.daemon.socket_path), seed=3).scheduler
        request = SimpleNamespace(request_id="r", prompt_token_ids=list(self.prompt),
                                  cache_salt=None, lora_request=None)
        self.assertEqual(scheduler.get_num_new_matched_tokens(request, 0), (63, False))
        scheduler.update_state_after_alloc(request, KVCacheBlocks(blocks), 63)
        return pickle.loads(pickle.dumps(scheduler.build_connector_meta(idle_output())))

    def check_fallbacks(self, engine, blocks, meta):
        request = SimpleNamespace(request_id="r", prompt_token_ids=list(self.prompt),
                                  cache_salt=None, lora_request=None)
        s, w = engine.scheduler, engine.worker
        self.assertEqual(s.get_num_new_matched_tokens(request, 0), (0, False))
        self.assertEqual(s.prefetch(request), 0)
        self.assertIsNone(s.on_new_request(request))
        self.assertIsNone(s.update_state_after_alloc(request, KVCacheBlocks(blocks), 16))
        self.assertEqual(len(s.build_connector_meta(idle_output()).native.loads), 1,
                         "the unplannable load goes out failed")
        self.assertEqual(s.request_finished(request, blocks), (False, None))
        w.bind_connector_metadata(meta)
        self.assertIsNone(w.start_load_kv(SimpleNamespace()))
        for name in engine.kv:
            self.assertIsNone(w.wait_for_layer_load(name))
            self.assertIsNone(w.save_kv_layer(name, engine.kv[name], None))
        self.assertIsNone(w.wait_for_save())
        self.assertEqual(w.get_finished(set()), (None, None))
        self.assertEqual(w.get_block_ids_with_load_errors(), blocks_of(blocks, 0, 63))
        self.assertIsNone(w.handle_preemptions(meta))
        w.clear_connector_metadata()
        self.assertIsInstance(w.get_kv_connector_stats(), (StrataKVConnectorStats, type(None)))

    def test_a_daemon_that_answers_garbage(self):
        path = os.path.join(self.daemon.dir, "garbage.sock")
        server = GarbageServer(path)
        self.addCleanup(server.close)
        engine = FakeEngine(fake_vllm_config(path, lookup_budget_ms=200))
        blocks = list(range(40, 56))
        self.check_fallbacks(engine, blocks, self.planned_load(blocks))

    def test_a_daemon_killed_before_the_load(self):
        engine = FakeEngine(fake_vllm_config(self.daemon.socket_path), seed=5)
        blocks = list(range(40, 56))
        meta = self.planned_load(blocks)
        self.daemon.proc.send_signal(signal.SIGKILL)
        self.daemon.proc.wait(timeout=30)
        self.check_fallbacks(engine, blocks, meta)

    def test_an_unreadable_scheduler_output_still_sends_the_planned_loads(self):
        engine = FakeEngine(fake_vllm_config(self.daemon.socket_path), seed=7)
        request = SimpleNamespace(request_id="r", prompt_token_ids=list(self.prompt),
                                  cache_salt=None, lora_request=None)
        blocks = list(range(16))
        self.assertEqual(engine.scheduler.get_num_new_matched_tokens(request, 0), (63, False))
        engine.scheduler.update_state_after_alloc(request, KVCacheBlocks(blocks), 63)
        bad = idle_output()
        bad.scheduled_new_reqs = [SimpleNamespace(req_id="r", block_ids=([1], [2]),
                                                  num_computed_tokens=63)]  # two KV groups
        meta = engine.scheduler.build_connector_meta(bad)
        self.assertEqual([load["request_id"] for load in meta.native.loads], ["r"])
        self.assertEqual(meta.native.saves, [])


class StatsTest(unittest.TestCase):

    def test_stats_are_what_grew_since_the_last_call(self):
        daemon = DaemonProcess()
        daemon.start()
        self.addCleanup(daemon.close)
        engine = FakeEngine(fake_vllm_config(daemon.socket_path))
        registered = engine.worker.get_kv_connector_stats()  # the session it opened, if any
        self.assertIn(registered.data if registered else {}, ({}, {"session_connects": 1}))
        engine.run("a", list(range(64)))
        first = engine.worker.get_kv_connector_stats()
        self.assertIsInstance(first, StrataKVConnectorStats)
        self.assertEqual(first.data["chunks_saved"], 4)
        self.assertIsNone(engine.worker.get_kv_connector_stats(), "nothing grew since")
        engine.run("b", list(range(1000, 1064)))
        second = engine.worker.get_kv_connector_stats()
        total = StrataConnector.build_kv_connector_stats(dict(first.data)).aggregate(second)
        self.assertEqual(total.reduce()["chunks_saved"], 8)
        self.assertFalse(total.is_empty())
        total.reset()
        self.assertTrue(total.is_empty())
        lookups = engine.scheduler.get_kv_connector_stats()
        self.assertEqual(lookups.data["lookups"], 2)


if __name__ == "__main__":
    unittest.main()
