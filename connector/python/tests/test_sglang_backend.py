"""The SGLang HiCache backend (strata_sglang.StrataHiCacheStorage) against a real daemon.

SGLang cannot be installed on the build machine, so the backend is checked against a table of
SGLang's HiCacheStorage interface (read at the commit below) and against a stand-in ``sglang``
package built from that table, never against SGLang itself. Host pools are ctypes buffers that
give page addresses the way SGLang's HostKVCache.get_page_buffer_meta does. The daemon is the
real engine-session server in another process (connector_test_daemon, path in
$STRATA_TEST_DAEMON).
"""

import ctypes
import inspect
import os
import shutil
import signal
import tempfile
import textwrap
import time
import unittest
from types import SimpleNamespace

import strata_connector
from stand_in import run_with_stand_in
import strata_sglang
from strata_sglang import StrataHiCacheStorage, options_from_storage_config
from strata_sglang.backend import _indices
from test_vllm_connector import BLOCK, CHUNK, DIM, HEADS, LAYERS, DaemonProcess, FakeEngine
from test_vllm_connector import fake_vllm_config

# SGLang's python/sglang/srt/mem_cache/hicache_storage.py, class HiCacheStorage, at this commit:
# every method with its parameters (self left out).
SGLANG_COMMIT = "001067fffe33427bee0ed2f007fb7551a1d76b44"
SGLANG_METHODS = {
    "register_mem_pool_host": ["mem_pool_host"],
    "register_mem_host_pool_v2": ["host_pool", "host_pool_name"],
    "batch_exists_v2": ["keys", "pool_transfers", "extra_info"],
    "batch_get_v2": ["transfers", "extra_info"],
    "batch_set_v2": ["transfers", "extra_info"],
    "batch_get_v1": ["keys", "host_indices", "extra_info"],
    "batch_set_v1": ["keys", "host_indices", "extra_info"],
    "get": ["key", "target_location", "target_sizes"],
    "batch_get": ["keys", "target_locations", "target_sizes"],
    "set": ["key", "value", "target_location", "target_sizes"],
    "batch_set": ["keys", "values", "target_locations", "target_sizes"],
    "exists": ["key"],
    "batch_exists": ["keys", "extra_info"],
    "clear": [],
    "get_stats": [],
}
# Abstract in the base: SGLang cannot instantiate a backend that lacks one.
SGLANG_ABSTRACT_METHODS = ["get", "batch_get", "set", "batch_set", "exists"]
# StorageBackendFactory._create_dynamic_backend (storage/backend_factory.py at that commit)
# calls backend_class(storage_config, kwargs), then register_mem_pool_host(host pool).
SGLANG_CONSTRUCTOR = ["storage_config", "kwargs"]

PAGE = CHUNK  # tokens per SGLang page (equal to the vLLM chunk, for the shared-daemon test)
TOKEN_BYTES = LAYERS * HEADS * DIM * 2  # one token of one plane (K or V) in bf16


class FakeHostPool:
    """An MHA page-first host pool: K and V buffers [token, layer, head, dim] in bf16; each page
    is two segments (its K rows, then its V rows), as get_page_buffer_meta gives them."""

    layout = "page_first"
    dtype = "torch.bfloat16"
    layer_num = LAYERS
    head_num = HEADS
    head_dim = DIM

    def __init__(self, num_pages=16, page_size=PAGE, seed=0):
        self.page_size = page_size
        self.size = num_pages * page_size
        self.k = (ctypes.c_uint8 * (self.size * TOKEN_BYTES))()
        self.v = (ctypes.c_uint8 * (self.size * TOKEN_BYTES))()
        for i in range(len(self.k)):
            self.k[i] = (i * 7 + seed * 13) & 0xFF
            self.v[i] = (i * 11 + seed * 5 + 1) & 0xFF

    def get_page_buffer_meta(self, indices):
        indices = indices.tolist()
        assert len(indices) % self.page_size == 0
        pointers = []
        for i in range(0, len(indices), self.page_size):
            pointers.append(ctypes.addressof(self.k) + indices[i] * TOKEN_BYTES)
            pointers.append(ctypes.addressof(self.v) + indices[i] * TOKEN_BYTES)
        return pointers, [self.page_size * TOKEN_BYTES] * len(pointers)

    def page(self, slot):
        """(K bytes, V bytes) of the page at pool slot `slot` (a page index)."""
        n = self.page_size * TOKEN_BYTES
        return (bytes(self.k[slot * n:(slot + 1) * n]), bytes(self.v[slot * n:(slot + 1) * n]))

    def clear(self):
        ctypes.memset(self.k, 0, len(self.k))
        ctypes.memset(self.v, 0, len(self.v))


class FakeStatePool:
    """An extra pool (Mamba-like state): one 256-byte segment per page of one token."""

    dtype = "torch.float32"
    page_size = 1

    def __init__(self, num_pages=16, seed=0):
        self.buf = (ctypes.c_uint8 * (num_pages * 256))()
        for i in range(len(self.buf)):
            self.buf[i] = (i * 3 + seed) & 0xFF

    def get_page_buffer_meta(self, indices):
        return [ctypes.addressof(self.buf) + i * 256 for i in indices.tolist()], 256

    def get_size_per_token(self):
        return 256


class FakeTensor:
    """A contiguous uint8 tensor-like over a ctypes buffer (what get/set read of a tensor)."""

    def __init__(self, data):
        self.buffer = (ctypes.c_uint8 * len(data)).from_buffer_copy(bytes(data))

    def data_ptr(self):
        return ctypes.addressof(self.buffer)

    def numel(self):
        return len(self.buffer)

    def element_size(self):
        return 1

    def is_contiguous(self):
        return True

    def bytes(self):
        return bytes(self.buffer)


def page_indices(slots, page_size=PAGE):
    """Host token indices of the pages at `slots` (what SGLang passes as host_indices)."""
    return _indices([s * page_size + t for s in slots for t in range(page_size)])


def storage_config(socket_path, model_name="fake/model", **extra):
    options = {"backend_name": "strata", "module_path": "strata_sglang",
               "class_name": "StrataHiCacheStorage", "interface_v1": 1,
               "socket_path": socket_path, "lookup_budget_ms": 2000, "io_timeout_ms": 2000,
               "reconnect_min_backoff_ms": 10, "reconnect_max_backoff_ms": 20}
    options.update(extra)
    return SimpleNamespace(tp_rank=0, tp_size=1, pp_rank=0, pp_size=1, attn_cp_rank=0,
                           attn_cp_size=1, is_mla_model=False, enable_storage_metrics=False,
                           is_page_first_layout=True, model_name=model_name, dp_rank=0,
                           dp_size=1, tp_lcm_size=None, should_split_heads=False,
                           extra_config=options)


def backend(socket_path, pool=None, **extra):
    b = StrataHiCacheStorage(storage_config(socket_path, **extra), {})
    b.register_mem_pool_host(pool if pool is not None else FakeHostPool())
    return b


class SGLangInterfaceTest(unittest.TestCase):

    def test_every_base_method_with_its_parameters(self):
        for name, params in SGLANG_METHODS.items():
            with self.subTest(method=name):
                self.assertTrue(hasattr(StrataHiCacheStorage, name), name)
                signature = inspect.signature(getattr(StrataHiCacheStorage, name))
                got = [p.name for p in signature.parameters.values() if p.name != "self"]
                self.assertEqual(got, params, name)
        signature = inspect.signature(StrataHiCacheStorage.__init__)
        self.assertEqual([p for p in signature.parameters if p != "self"], SGLANG_CONSTRUCTOR)
        self.assertEqual(strata_sglang.SGLANG_COMMIT, SGLANG_COMMIT)

    def test_duck_typed_without_sglang(self):
        self.assertFalse(strata_sglang.SGLANG_AVAILABLE, "SGLang is not installed here")
        self.assertEqual(StrataHiCacheStorage.__bases__, (object,))

    def test_options_from_the_pool(self):
        o = options_from_storage_config(storage_config("/tmp/x.sock"), FakeHostPool())
        self.assertEqual((o.kv_kind, o.num_layers, o.num_kv_heads, o.head_dim, o.dtype),
                         ("mha", LAYERS, HEADS, DIM, "torch.bfloat16"))
        self.assertEqual((o.page_tokens, o.model_id, o.tp_rank, o.tp_world_size),
                         (PAGE, "fake/model", 0, 1))
        self.assertEqual(o.page_bytes(), 2 * PAGE * TOKEN_BYTES)
        config = storage_config("/tmp/x.sock")
        config.tp_rank, config.tp_size, config.pp_rank, config.pp_size = 1, 2, 1, 2
        o = options_from_storage_config(config, FakeHostPool())
        self.assertEqual((o.tp_rank, o.tp_world_size, o.model_id), (1, 2, "fake/model#pp1/2"))
        # A pool whose geometry does not add up gets a byte layout of its page size.
        o = options_from_storage_config(storage_config("/tmp/x.sock"), FakeStatePool(), "mamba")
        self.assertEqual((o.kv_kind, o.dtype, o.model_id), ("mla", "int8", "fake/model#pool=mamba"))
        self.assertEqual(o.page_bytes(), 256)

    def test_sglang_loads_it_as_a_dynamic_backend(self):
        """What StorageBackendFactory does for --hicache-storage-backend dynamic, in a process
        where a (stand-in) sglang package is importable: the class must subclass HiCacheStorage,
        be constructible as cls(storage_config, kwargs), and take the host pool."""
        root = tempfile.mkdtemp(prefix="strata-sglang-stand-in-")
        self.addCleanup(shutil.rmtree, root, True)
        write_sglang_stand_in(root)
        script = textwrap.dedent("""
            from sglang.srt.mem_cache.hicache_storage import HiCacheStorage, PoolTransferResult
            from sglang.srt.mem_cache.storage.backend_factory import StorageBackendFactory
            import strata_sglang
            from strata_sglang import StrataHiCacheStorage
            import test_sglang_backend as t
            assert strata_sglang.SGLANG_AVAILABLE
            assert issubclass(StrataHiCacheStorage, HiCacheStorage), StrataHiCacheStorage.__mro__
            config = t.storage_config("/nonexistent/engine.sock", lookup_budget_ms=20)
            storage = StorageBackendFactory.create_backend("dynamic", config, t.FakeHostPool())
            assert type(storage) is StrataHiCacheStorage, type(storage)
            storage.register_mem_pool_host(t.FakeHostPool())
            assert storage.batch_exists(["a", "b"]) == 0
            result = storage.batch_exists_v2(["a"])
            assert isinstance(result, PoolTransferResult) and result.kv_hit_pages == 0, result
            assert storage.batch_get_v1(["a"], t.page_indices([0])) == [False]
            print("loaded", type(storage).__name__)
            """)
        result = run_with_stand_in(root, script)
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertIn("loaded StrataHiCacheStorage", result.stdout)


def write_sglang_stand_in(root):
    """An sglang package with hicache_storage's types as the table above describes them (SGLang
    itself cannot be installed here), and a backend factory with the dynamic-backend contract:
    import module_path, require a HiCacheStorage subclass, construct cls(storage_config,
    kwargs)."""
    mem_cache = os.path.join(root, "sglang", "srt", "mem_cache")
    os.makedirs(os.path.join(mem_cache, "storage"))
    for d in ("sglang", "sglang/srt", "sglang/srt/mem_cache", "sglang/srt/mem_cache/storage"):
        open(os.path.join(root, d, "__init__.py"), "w").close()
    methods = []
    for name, params in SGLANG_METHODS.items():
        args = ", ".join(["self"] + [f"{p}=None" for p in params])
        decorator = "    @abstractmethod\n" if name in SGLANG_ABSTRACT_METHODS else ""
        methods.append(f"{decorator}    def {name}({args}):\n        raise NotImplementedError\n")
    with open(os.path.join(mem_cache, "hicache_storage.py"), "w") as f:
        f.write("from abc import ABC, abstractmethod\n"
                "from dataclasses import dataclass, field\n"
                "from enum import Enum\n\n"
                "class PoolName(str, Enum):\n    KV = 'kv'\n\n"
                "class PoolHitPolicy(str, Enum):\n"
                "    ALL_PAGES = 'all_pages'\n    TRAILING_PAGES = 'trailing_pages'\n\n"
                "@dataclass\nclass PoolTransferResult:\n"
                "    kv_hit_pages: int\n    extra_pool_hit_pages: dict\n\n"
                "class HiCacheStorage(ABC):\n" + "\n".join(methods))
    with open(os.path.join(mem_cache, "storage", "backend_factory.py"), "w") as f:
        f.write("import importlib\n"
                "from sglang.srt.mem_cache.hicache_storage import HiCacheStorage\n\n"
                "class StorageBackendFactory:\n"
                "    @classmethod\n"
                "    def create_backend(cls, backend_name, storage_config, mem_pool_host,"
                " **kwargs):\n"
                "        assert backend_name == 'dynamic'\n"
                "        extra = storage_config.extra_config\n"
                "        module = importlib.import_module(extra['module_path'])\n"
                "        backend_class = getattr(module, extra['class_name'])\n"
                "        if not issubclass(backend_class, HiCacheStorage):\n"
                "            raise TypeError('not a HiCacheStorage')\n"
                "        return backend_class(storage_config, kwargs)\n")


class SGLangBackendTest(unittest.TestCase):

    def setUp(self):
        self.daemon = DaemonProcess()
        self.daemon.start()
        self.addCleanup(self.daemon.close)

    def test_zero_copy_round_trip_is_byte_exact(self):
        src_pool = FakeHostPool(seed=1)
        a = backend(self.daemon.socket_path, src_pool)
        keys = [f"hash-{i}" for i in range(4)]
        self.assertEqual(a.batch_set_v1(keys, page_indices([3, 5, 0, 9])), [True] * 4)
        self.assertEqual(a.batch_exists(keys + ["other"]), 4)
        self.assertTrue(a.exists("hash-2"))
        self.assertFalse(a.exists("other"))

        # Another SGLang instance (another pool, other slots) loads them.
        dst_pool = FakeHostPool(seed=2)
        dst_pool.clear()
        b = backend(self.daemon.socket_path, dst_pool)
        self.assertEqual(b.batch_exists(keys), 4)
        got = b.batch_get_v1(keys + ["missing"], page_indices([1, 2, 4, 6, 7]))
        self.assertEqual(got, [True, True, True, True, False])
        for src_slot, dst_slot in zip([3, 5, 0, 9], [1, 2, 4, 6]):
            self.assertEqual(dst_pool.page(dst_slot), src_pool.page(src_slot))
        self.assertEqual(dst_pool.page(7), (bytes(PAGE * TOKEN_BYTES),) * 2)
        self.assertEqual(b.stats()["kv"]["pages_loaded"], 4)

        # Storing again finds them present.
        self.assertEqual(a.batch_set_v1(keys[:2], page_indices([3, 5])), [True, True])
        self.assertEqual(a.stats()["kv"]["pages_already_present"], 2)

    def test_missing_keys_and_bad_arguments_fail_softly(self):
        a = backend(self.daemon.socket_path)
        self.assertEqual(a.batch_exists([]), 0)
        self.assertEqual(a.batch_exists(["nope"]), 0)
        self.assertEqual(a.batch_get_v1(["nope", "nope2"], page_indices([0, 1])), [False, False])
        # Host indices that do not cover the pages: nothing happens, every page fails.
        self.assertEqual(a.batch_set_v1(["x", "y"], page_indices([0])), [False, False])
        self.assertEqual(a.batch_get_v1(["x"], None), [False])
        self.assertIsNone(a.get("nope", FakeTensor(bytes(2 * PAGE * TOKEN_BYTES))))
        self.assertFalse(a.set("x", FakeTensor(b"too short")))
        self.assertFalse(a.set("x"))
        self.assertIsNone(a.clear())
        self.assertIsNone(a.get_stats())

    def test_flat_page_interface_round_trip(self):
        a = backend(self.daemon.socket_path)
        page_bytes = 2 * PAGE * TOKEN_BYTES
        pages = [FakeTensor(bytes((i * 31 + j) & 0xFF for j in range(page_bytes)))
                 for i in range(3)]
        self.assertTrue(a.set("flat-0", pages[0]))
        self.assertTrue(a.batch_set(["flat-1", "flat-2"], pages[1:]))
        targets = [FakeTensor(bytes(page_bytes)) for _ in range(4)]
        got = a.batch_get(["flat-0", "flat-1", "flat-2", "flat-3"], targets)
        self.assertEqual(got[:3], targets[:3])
        self.assertIsNone(got[3])
        for page, target in zip(pages, targets):
            self.assertEqual(target.bytes(), page.bytes())
        single = FakeTensor(bytes(page_bytes))
        self.assertIs(a.get("flat-2", single), single)
        self.assertEqual(single.bytes(), pages[2].bytes())
        # Addresses and sizes work as well as tensors.
        raw = FakeTensor(bytes(page_bytes))
        self.assertEqual(a.get("flat-1", raw.data_ptr(), page_bytes), raw.data_ptr())
        self.assertEqual(raw.bytes(), pages[1].bytes())

    def test_pool_transfers_v2(self):
        kv_pool, state_pool = FakeHostPool(seed=3), FakeStatePool(seed=4)
        a = backend(self.daemon.socket_path, kv_pool)
        a.register_mem_host_pool_v2(kv_pool, "kv")
        a.register_mem_host_pool_v2(state_pool, "mamba")
        keys = [f"p{i}" for i in range(4)]
        transfers = [
            SimpleNamespace(name="kv", keys=keys, host_indices=page_indices([0, 1, 2, 3])),
            # The state of the last two pages only.
            SimpleNamespace(name="mamba", keys=keys[2:], host_indices=_indices([5, 6])),
        ]
        self.assertEqual(a.batch_set_v2(transfers), {"kv": [True] * 4, "mamba": [True, True]})

        all_pages = SimpleNamespace(name="mamba", keys=keys, hit_policy="all_pages")
        trailing = SimpleNamespace(name="mamba", keys=keys[:2], hit_policy="trailing_pages")
        result = a.batch_exists_v2(keys, [all_pages])
        self.assertEqual(result.kv_hit_pages, 0, "mamba pages 0 and 1 were never stored")
        result = a.batch_exists_v2(keys, [trailing])
        self.assertEqual((result.kv_hit_pages, result.extra_pool_hit_pages["mamba"]), (4, 4))
        self.assertEqual(a.batch_exists_v2(keys).kv_hit_pages, 4)

        state_dst = FakeStatePool(seed=9)
        b = backend(self.daemon.socket_path, FakeHostPool())
        b.register_mem_host_pool_v2(state_dst, "mamba")
        got = b.batch_get_v2([SimpleNamespace(name="mamba", keys=keys[2:] + ["p9"],
                                              host_indices=_indices([0, 1, 2]))])
        self.assertEqual(got, {"mamba": [True, True, False]})
        self.assertEqual(bytes(state_dst.buf[:512]), bytes(state_pool.buf[5 * 256:7 * 256]))
        # An unregistered pool fails alone.
        got = b.batch_get_v2([SimpleNamespace(name="swa", keys=["p0"],
                                              host_indices=_indices([0]))])
        self.assertEqual(got, {"swa": [False]})

    def test_daemon_killed_then_back(self):
        pool = FakeHostPool(seed=5)
        a = backend(self.daemon.socket_path, pool)
        self.assertEqual(a.batch_set_v1(["k0", "k1"], page_indices([0, 1])), [True, True])
        self.daemon.proc.send_signal(signal.SIGKILL)
        self.daemon.proc.wait(timeout=30)
        self.daemon.proc.stdin.close()
        self.daemon.proc.stdout.close()
        self.daemon.proc = None
        self.assertEqual(a.batch_exists(["k0", "k1"]), 0)
        self.assertFalse(a.exists("k0"))
        self.assertEqual(a.batch_get_v1(["k0"], page_indices([2])), [False])
        self.assertEqual(a.batch_set_v1(["k2"], page_indices([2])), [False])
        self.assertIsNone(a.get("k0", FakeTensor(bytes(2 * PAGE * TOKEN_BYTES))))
        self.assertFalse(a.batch_set(["k3"], [FakeTensor(bytes(2 * PAGE * TOKEN_BYTES))]))
        self.assertEqual(a.batch_exists_v2(["k0"]).kv_hit_pages, 0)

        # A new daemon on the same socket (an empty cache): the backend reconnects by itself.
        self.daemon.start()
        deadline = time.monotonic() + 5
        stored = []
        while time.monotonic() < deadline:
            stored = a.batch_set_v1(["k0"], page_indices([0]))
            if stored == [True]:
                break
            time.sleep(0.02)
        self.assertEqual(stored, [True])
        self.assertEqual(a.batch_exists(["k0", "k1"]), 1)


class NoDaemonTest(unittest.TestCase):

    def test_absent_daemon_gives_the_fallbacks(self):
        a = backend("/nonexistent/strata/engine.sock", lookup_budget_ms=20)
        tensor = FakeTensor(bytes(2 * PAGE * TOKEN_BYTES))
        self.assertEqual(a.batch_exists(["a", "b"]), 0)
        self.assertFalse(a.exists("a"))
        self.assertEqual(a.batch_get_v1(["a", "b"], page_indices([0, 1])), [False, False])
        self.assertEqual(a.batch_set_v1(["a"], page_indices([0])), [False])
        self.assertIsNone(a.get("a", tensor))
        self.assertEqual(a.batch_get(["a"], [tensor]), [None])
        self.assertFalse(a.set("a", tensor))
        self.assertFalse(a.batch_set(["a"], [tensor]))
        self.assertEqual(a.batch_exists_v2(["a"]).kv_hit_pages, 0)
        self.assertEqual(a.batch_get_v2([SimpleNamespace(name="kv", keys=["a"],
                                                         host_indices=page_indices([0]))]),
                         {"kv": [False]})
        self.assertFalse(a.stats()["kv"]["connected"])

    def test_unregistered_or_unusable_pool_gives_the_fallbacks(self):
        a = StrataHiCacheStorage(storage_config("/nonexistent/engine.sock"), {})
        self.assertEqual(a.batch_exists(["a"]), 0)
        self.assertEqual(a.batch_get_v1(["a"], page_indices([0])), [False])
        a.register_mem_pool_host(object())  # no page buffers, no size: logged, not raised
        self.assertEqual(a.batch_set_v1(["a"], page_indices([0])), [False])
        a.close()
        self.assertEqual(a.batch_exists(["a"]), 0)


class SharedDaemonTest(unittest.TestCase):
    """A vLLM instance (the vLLM adapter) and an SGLang instance on one daemon, with the same
    model and geometry: they share the daemon, not their chunks."""

    def setUp(self):
        self.daemon = DaemonProcess()
        self.daemon.start()
        self.addCleanup(self.daemon.close)

    def test_vllm_and_sglang_do_not_see_each_others_chunks(self):
        socket_path = self.daemon.socket_path
        vllm_config = fake_vllm_config(socket_path)
        self.assertEqual(vllm_config.cache_config.block_size, BLOCK)
        prompt = list(range(300, 364))  # 4 chunks of CHUNK tokens
        vllm_a = FakeEngine(vllm_config)
        matched, _, _ = vllm_a.run("a", prompt)
        self.assertEqual(matched, 0)
        self.assertEqual(vllm_a.worker.stats()["chunks_saved"], 4)

        # SGLang with the same model id and page geometry as vLLM's chunks: the same layout.
        sglang = backend(socket_path, FakeHostPool(seed=6))
        options = options_from_storage_config(storage_config(socket_path), FakeHostPool())
        self.assertEqual((options.model_id, options.num_layers, options.num_kv_heads,
                          options.head_dim, options.page_tokens),
                         ("fake/model", LAYERS, HEADS, DIM, CHUNK))
        # SGLang keys name the same prompt's pages (its own hash strings, here the tokens):
        # none of vLLM's chunks is found under them.
        sglang_keys = [",".join(map(str, prompt[:(i + 1) * PAGE])) for i in range(4)]
        self.assertEqual(sglang.batch_exists(sglang_keys), 0)
        self.assertEqual(sglang.batch_get_v1(sglang_keys, page_indices([0, 1, 2, 3])),
                         [False] * 4)

        # SGLang stores its pages; vLLM neither finds them for a new prompt nor loses its own.
        other_prompt = list(range(900, 964))
        other_keys = [",".join(map(str, other_prompt[:(i + 1) * PAGE])) for i in range(4)]
        self.assertEqual(sglang.batch_set_v1(other_keys, page_indices([0, 1, 2, 3])),
                         [True] * 4)
        self.assertEqual(sglang.batch_exists(other_keys), 4)
        vllm_b = FakeEngine(vllm_config, seed=5)
        matched, _, _ = vllm_b.run("b", other_prompt)
        self.assertEqual(matched, 0, "vLLM found SGLang's pages")
        vllm_c = FakeEngine(vllm_config, seed=9)
        matched, blocks, errors = vllm_c.run("c", prompt)
        self.assertEqual(errors, set())
        self.assertGreater(matched, 0, "vLLM lost its own chunks")
        self.assertEqual(vllm_c.wrong_positions(prompt, blocks, 0, len(prompt)), [])
        # And SGLang still does not see vLLM's chunks, nor vLLM's store of other_prompt.
        self.assertEqual(sglang.batch_exists(sglang_keys), 0)
        self.assertEqual(sglang.batch_exists(other_keys), 4)


if __name__ == "__main__":
    unittest.main()
