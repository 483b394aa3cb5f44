"""StrataHiCacheStorage: SGLang's HiCache L3 storage backend over the local Strata daemon.

SGLang's HiCache keeps KV pages in a host memory pool (L2) and backs them up to, and prefetches
them from, a storage backend (L3) under page hash strings. This backend stores each page as one
daemon chunk through ``strata_connector.PageStore`` (connector/include/strata/page_store.h): the
page's bytes are copied between SGLang's host pool and the daemon's shared arena, checksummed
(xxh3-64) on the way in and verified on the way out.

Construction follows SGLang's dynamic backends (``StorageBackendFactory._create_dynamic_backend``
calls ``cls(storage_config, kwargs)``); the host pool arrives afterwards through
``register_mem_pool_host``, and the daemon session is set up then, from the pool's geometry.
The daemon need not be up: the session connects lazily and reconnects by itself.

Every method SGLang calls is guarded: a failure (daemon absent or killed, a pool that does not
give page addresses, anything else) is logged once per method and kind of failure and returns
the interface's "not found / failed" value (0 pages, False, None), never an exception into
SGLang's prefetch or backup threads (which SGLang never restarts).

Keys: SGLang's page hashes, mapped to daemon keys in a key space of their own (see
strata/page_store.h), so pages stored by SGLang and chunks stored by vLLM never meet.
"""

from __future__ import annotations

import functools
import inspect
import logging
import os
import threading
from typing import Any, List, Optional

import strata_connector

from .sglang_types import STORAGE_BASES, PoolHitPolicy, PoolName, PoolTransferResult

try:  # SGLang always has torch; tests and tools may not.
    import torch
except ImportError:  # pragma: no cover - depends on the environment
    torch = None

logger = logging.getLogger("strata_sglang")

# extra_config keys this backend reads (durations in milliseconds).
CONFIG_KEYS = {
    "socket_path": str,
    "engine_id": str,
    "model_id": str,
    "io_timeout_ms": int,
    "lookup_budget_ms": int,
    "reconnect_min_backoff_ms": int,
    "reconnect_max_backoff_ms": int,
    "lease_ms": int,
}
# extra_config keys SGLang itself reads; not ours, not reported.
SGLANG_KEYS = {"backend_name", "module_path", "class_name", "interface_v1", "tp_lcm_size",
               "prefetch_threshold", "prefetch_timeout_base", "prefetch_timeout_per_ki_token",
               "prefetch_timeout_max", "hicache_storage_pass_prefix_keys"}

KV_POOL = "kv"


def default_socket_path() -> str:
    """The daemon's default engine socket (README: $XDG_RUNTIME_DIR/strata/engine.sock, else
    ./var/run/strata/engine.sock)."""
    runtime_dir = os.environ.get("XDG_RUNTIME_DIR")
    if runtime_dir:
        return os.path.join(runtime_dir, "strata", "engine.sock")
    return os.path.abspath(os.path.join("var", "run", "strata", "engine.sock"))


class _IndexList(list):
    """Token indices for a pool's get_page_buffer_meta when torch is not importable."""

    def tolist(self):
        return list(self)

    def numel(self):
        return len(self)


def _indices(values) -> Any:
    values = list(values)
    if torch is not None:
        return torch.tensor(values, dtype=torch.int64)
    return _IndexList(values)


def _pool_name(name) -> str:
    return str(getattr(name, "value", name))


def page_segments(pool, host_indices, num_pages: int) -> list:
    """Per page, its (address, size_bytes) segments in host memory, by duck typing on SGLang's
    HostKVCache.get_page_buffer_meta(indices) -> (pointers, sizes): the pointers of every page in
    order, the same number per page; sizes a list (one per pointer) or a single size."""
    if num_pages == 0:
        return []
    pointers, sizes = pool.get_page_buffer_meta(host_indices)
    pointers = [int(p) for p in pointers]
    if isinstance(sizes, int):
        sizes = [sizes] * len(pointers)
    sizes = [int(s) for s in sizes]
    if len(sizes) != len(pointers) or len(pointers) % num_pages != 0:
        raise ValueError(f"pool gave {len(pointers)} pointers and {len(sizes)} sizes for "
                         f"{num_pages} pages")
    per_page = len(pointers) // num_pages
    return [list(zip(pointers[i * per_page:(i + 1) * per_page],
                     sizes[i * per_page:(i + 1) * per_page])) for i in range(num_pages)]


def measured_page_bytes(pool) -> int:
    """Bytes of one page of `pool`: what its page buffers say, else its per-token size."""
    page_size = int(getattr(pool, "page_size", 1) or 1)
    try:
        segments = page_segments(pool, _indices(range(page_size)), 1)
        return sum(size for _, size in segments[0])
    except Exception:  # layer-first pools give no page buffers
        return int(pool.get_size_per_token()) * page_size


def _largest_divisor_at_most(n: int, limit: int) -> int:
    for d in range(min(n, limit), 0, -1):
        if n % d == 0:
            return d
    return 1


def _byte_geometry(bytes_per_token: int) -> tuple:
    """(num_layers, num_kv_heads, head_dim) of an int8 one-plane layout holding exactly
    bytes_per_token bytes per token, within KvLayout's limits."""
    head_dim = _largest_divisor_at_most(bytes_per_token, 8192)
    rest = bytes_per_token // head_dim
    heads = _largest_divisor_at_most(rest, 4096)
    return rest // heads, heads, head_dim


def options_from_storage_config(storage_config, pool, pool_name: str = KV_POOL):
    """The PageStoreOptions of `pool` (one SGLang host pool) under `storage_config`.

    The layout is the pool's geometry when it accounts for the page's bytes exactly (MHA: layers,
    KV heads, head dim, dtype; MLA: one plane of kv_lora_rank + qk_rope_head_dim); otherwise an
    int8 byte layout of the page's size. TP rank and size enter the layout (MLA's pages are the
    same on every rank: rank 0 of 1); PP and attention-CP ranks, and extra pools, enter the
    model id. ValueError for unusable configuration."""
    extra = dict(getattr(storage_config, "extra_config", None) or {})
    unknown = sorted(set(extra) - set(CONFIG_KEYS) - SGLANG_KEYS)
    if unknown:
        logger.warning("strata_sglang: ignoring extra_config keys %s (this backend reads %s)",
                       unknown, sorted(CONFIG_KEYS))
    o = strata_connector.PageStoreOptions()
    o.socket_path = str(extra.get("socket_path") or default_socket_path())
    for key in ("engine_id",):
        if key in extra:
            setattr(o, key, str(extra[key]))
    for key in ("io_timeout_ms", "lookup_budget_ms", "reconnect_min_backoff_ms",
                "reconnect_max_backoff_ms", "lease_ms"):
        if key in extra:
            setattr(o, key, int(extra[key]))

    is_mla = bool(getattr(storage_config, "is_mla_model", False))
    model = str(extra.get("model_id") or getattr(storage_config, "model_name", None) or "unknown")
    suffix = ""
    pp_size = int(getattr(storage_config, "pp_size", 1) or 1)
    if pp_size > 1:
        suffix += f"#pp{int(storage_config.pp_rank)}/{pp_size}"
    cp_size = int(getattr(storage_config, "attn_cp_size", 1) or 1)
    if cp_size > 1:
        suffix += f"#cp{int(storage_config.attn_cp_rank)}/{cp_size}"
    if pool_name != KV_POOL:
        suffix += f"#pool={pool_name}"
    o.model_id = model + suffix
    if is_mla:
        o.tp_rank, o.tp_world_size = 0, 1
    else:
        o.tp_rank = int(getattr(storage_config, "tp_rank", 0) or 0)
        o.tp_world_size = int(getattr(storage_config, "tp_size", 1) or 1)

    page_size = int(getattr(pool, "page_size", 1) or 1)
    o.page_tokens = page_size
    page_bytes = measured_page_bytes(pool)
    if page_bytes <= 0 or page_bytes % page_size != 0:
        raise ValueError(f"strata_sglang: a page of {page_bytes} bytes for {page_size} tokens")
    try:
        o.dtype = str(pool.dtype)
        o.num_layers = int(pool.layer_num)
        if is_mla and pool_name == KV_POOL:
            o.kv_kind = "mla"
            o.num_kv_heads = 1
            o.head_dim = int(pool.kv_lora_rank) + int(pool.qk_rope_head_dim)
        else:
            o.kv_kind = "mha"
            o.num_kv_heads = int(pool.head_num)
            o.head_dim = int(pool.head_dim)
        if o.page_bytes() == page_bytes:
            return o
    except Exception:  # noqa: BLE001 - any missing or odd attribute: use the byte layout
        pass
    o.kv_kind, o.dtype = "mla", "int8"
    o.num_layers, o.num_kv_heads, o.head_dim = _byte_geometry(page_bytes // page_size)
    o.validate()
    return o


def _guarded(fallback):
    """Runs the method; on any exception logs once (per method and exception type) and returns
    fallback(arguments), where arguments maps the method's parameter names to their values."""

    def wrap(method):
        signature = inspect.signature(method)

        @functools.wraps(method)
        def guarded(self, *args, **kwargs):
            try:
                return method(self, *args, **kwargs)
            except Exception as e:  # noqa: BLE001 - the engine must never see it
                self._log_once(method.__name__, e)
                try:
                    bound = signature.bind(self, *args, **kwargs)
                    bound.apply_defaults()
                    return fallback(bound.arguments)
                except Exception:  # noqa: BLE001 - arguments SGLang should not have sent
                    return fallback(None)

        return guarded

    return wrap


def _falses(name):
    return lambda a: [False] * len(a[name] or []) if a else []


def _pool_falses(a):
    if not a:
        return {}
    return {t.name: [False] * len(t.keys or []) for t in (a["transfers"] or [])}


def _tensor_span(tensor) -> tuple:
    """(address, size_bytes) of a contiguous tensor-like (data_ptr, numel, element_size)."""
    contiguous = getattr(tensor, "is_contiguous", None)
    if contiguous is not None and not contiguous():
        raise ValueError("tensor is not contiguous")
    return int(tensor.data_ptr()), int(tensor.numel()) * int(tensor.element_size())


class StrataHiCacheStorage(*STORAGE_BASES):
    """SGLang HiCacheStorage over the Strata daemon (see the module docstring).

    Thread-safe: SGLang's prefetch and backup threads call it concurrently."""

    def __init__(self, storage_config, kwargs=None):
        # No base-class __init__: SGLang's HiCacheStorage defines none (an ABC).
        self.storage_config = storage_config
        self.mem_pool_host = None
        self.registered_pools = {}
        self._stores = {}
        self._lock = threading.Lock()
        self._logged = set()
        self._closed = False
        # A built-in style construction (cls(storage_config, mem_pool_host)) passes the pool.
        if kwargs is not None and hasattr(kwargs, "get_page_buffer_meta"):
            self.register_mem_pool_host(kwargs)

    # ---- guarding and set-up ---------------------------------------------------------------

    def _log_once(self, what: str, error: BaseException) -> None:
        key = (what, type(error).__name__)
        if key in self._logged:
            logger.debug("strata_sglang: %s failed: %s", what, error)
            return
        self._logged.add(key)
        logger.warning("strata_sglang: %s failed (%s: %s); reporting pages as missing / not "
                       "stored (logged once)", what, type(error).__name__, error)

    def _store(self, pool_name: str = KV_POOL):
        """The PageStore of a registered pool, created on first use."""
        if self._closed:
            raise RuntimeError("the backend is closed")
        store = self._stores.get(pool_name)
        if store is not None:
            return store
        pool = self._pool(pool_name)
        with self._lock:
            store = self._stores.get(pool_name)
            if store is None:
                options = options_from_storage_config(self.storage_config, pool, pool_name)
                store = strata_connector.PageStore(options)
                self._stores[pool_name] = store
                logger.info("strata_sglang: pool %s: %d-byte pages of %s on %s", pool_name,
                            store.page_bytes, options.model_id, options.socket_path)
        return store

    def _pool(self, pool_name: str):
        pool = self.registered_pools.get(pool_name)
        if pool is None and pool_name == KV_POOL:
            pool = self.mem_pool_host
        if pool is None:
            raise KeyError(f"no host pool registered as {pool_name!r}")
        return pool

    def _pages(self, pool_name: str, keys: List[str], host_indices) -> list:
        pool = self._pool(pool_name)
        page_size = int(getattr(pool, "page_size", 1) or 1)
        if len(host_indices) != len(keys) * page_size:
            raise ValueError(f"{len(host_indices)} host indices for {len(keys)} pages of "
                             f"{page_size} tokens")
        return page_segments(pool, host_indices, len(keys))

    # ---- registration (SGLang calls these once) --------------------------------------------

    @_guarded(lambda a: None)
    def register_mem_pool_host(self, mem_pool_host):
        self.mem_pool_host = mem_pool_host
        self._stores.pop(KV_POOL, None)
        self._store(KV_POOL)  # validates the geometry now: a bad one is logged at start-up

    @_guarded(lambda a: None)
    def register_mem_host_pool_v2(self, host_pool, host_pool_name):
        name = _pool_name(host_pool_name)
        self.registered_pools[name] = host_pool
        self._stores.pop(name, None)

    # ---- zero-copy page interface (extra_config interface_v1: 1) ---------------------------

    @_guarded(_falses("keys"))
    def batch_get_v1(self, keys: List[str], host_indices, extra_info=None) -> List[bool]:
        if not keys:
            return []
        return list(self._store().get(list(keys), self._pages(KV_POOL, keys, host_indices)))

    @_guarded(_falses("keys"))
    def batch_set_v1(self, keys: List[str], host_indices, extra_info=None) -> List[bool]:
        if not keys:
            return []
        return list(self._store().put(list(keys), self._pages(KV_POOL, keys, host_indices)))

    # ---- existence -------------------------------------------------------------------------

    @_guarded(lambda a: 0)
    def batch_exists(self, keys: List[str], extra_info=None) -> int:
        if not keys:
            return 0
        return int(self._store().exists(list(keys)))

    @_guarded(lambda a: False)
    def exists(self, key: str) -> bool:
        return self._store().exists([key]) == 1

    # ---- per-pool (v2) interface -----------------------------------------------------------

    @_guarded(lambda a: PoolTransferResult(0, {}))
    def batch_exists_v2(self, keys: List[str], pool_transfers=None, extra_info=None):
        kv_pages = int(self._store().exists(list(keys))) if keys else 0
        hits = {PoolName.KV: kv_pages} if kv_pages else {}
        final = kv_pages
        for transfer in pool_transfers or []:
            if final == 0:
                break
            store = self._store(_pool_name(transfer.name))
            if transfer.hit_policy == PoolHitPolicy.TRAILING_PAGES:
                trailing = max(1, len(transfer.keys) if transfer.keys else 1)
                boundary = 0
                for prefix in range(kv_pages, 0, -1):
                    window = list(keys[max(0, prefix - trailing):prefix])
                    if store.exists(window) == len(window):
                        boundary = prefix
                        break
            else:
                boundary = int(store.exists(list(keys[:kv_pages])))
            if boundary:
                hits[transfer.name] = boundary
            final = min(final, boundary)
        return PoolTransferResult(final, hits)

    def _batch_io_v2(self, transfers, write: bool) -> dict:
        results = {}
        for transfer in transfers or []:
            keys = list(transfer.keys or [])
            try:
                name = _pool_name(transfer.name)
                store = self._store(name)
                pages = self._pages(name, keys, transfer.host_indices)
                flags = store.put(keys, pages) if write else store.get(keys, pages)
                results[transfer.name] = list(flags)
            except Exception as e:  # noqa: BLE001 - this pool fails, the others go on
                self._log_once("batch_set_v2" if write else "batch_get_v2", e)
                results[transfer.name] = [False] * len(keys)
        return results

    @_guarded(_pool_falses)
    def batch_get_v2(self, transfers, extra_info=None) -> dict:
        return self._batch_io_v2(transfers, write=False)

    @_guarded(_pool_falses)
    def batch_set_v2(self, transfers, extra_info=None) -> dict:
        return self._batch_io_v2(transfers, write=True)

    # ---- generic (flat page) interface -----------------------------------------------------

    def _target_span(self, target_location, target_sizes) -> tuple:
        if isinstance(target_location, int):
            return target_location, int(target_sizes)
        return _tensor_span(target_location)

    @_guarded(lambda a: None)
    def get(self, key: str, target_location: Optional[Any] = None,
            target_sizes: Optional[Any] = None):
        store = self._store()
        if target_location is None:
            if torch is None:
                raise ValueError("get without a target needs torch")
            target_location = torch.empty(store.page_bytes, dtype=torch.uint8)
        span = self._target_span(target_location, target_sizes)
        return target_location if store.get([key], [[span]])[0] else None

    @_guarded(lambda a: [None] * len(a["keys"] or []) if a else [])
    def batch_get(self, keys: List[str], target_locations: Optional[Any] = None,
                  target_sizes: Optional[Any] = None):
        if not keys:
            return []
        if target_locations is None:
            return [self.get(key) for key in keys]
        sizes = target_sizes if target_sizes is not None else [None] * len(keys)
        spans = [[self._target_span(t, s)] for t, s in zip(target_locations, sizes)]
        found = self._store().get(list(keys), spans)
        return [t if ok else None for t, ok in zip(target_locations, found)]

    @_guarded(lambda a: False)
    def set(self, key: str, value: Optional[Any] = None, target_location: Optional[Any] = None,
            target_sizes: Optional[Any] = None) -> bool:
        source = value if value is not None else target_location
        if source is None:
            raise ValueError("set without a value")
        span = self._target_span(source, target_sizes)
        return bool(self._store().put([key], [[span]])[0])

    @_guarded(lambda a: False)
    def batch_set(self, keys: List[str], values: Optional[Any] = None,
                  target_locations: Optional[Any] = None,
                  target_sizes: Optional[Any] = None) -> bool:
        if not keys:
            return True
        sources = values if values is not None else target_locations
        if sources is None:
            raise ValueError("batch_set without values")
        sizes = target_sizes if target_sizes is not None else [None] * len(keys)
        spans = [[self._target_span(v, s)] for v, s in zip(sources, sizes)]
        if len(spans) != len(keys):
            raise ValueError(f"{len(spans)} values for {len(keys)} keys")
        return all(self._store().put(list(keys), spans))

    # ---- housekeeping ----------------------------------------------------------------------

    @_guarded(lambda a: None)
    def clear(self) -> None:
        # The daemon is shared with other engines, and the engine protocol clears nothing: use
        # `strata clear --by-layout ...` (control API) to drop this model's pages.
        if "clear" not in self._logged:
            self._logged.add("clear")
            logger.warning("strata_sglang: clear() does nothing: the daemon is shared; drop "
                           "pages with `strata clear --by-layout ...` (logged once)")

    @_guarded(lambda a: None)
    def get_stats(self):
        # SGLang's storage metrics expect its own types; the page store's counters are in
        # stats().
        return None

    def stats(self) -> dict:
        """The page stores' counters, per pool name ({} before registration or when closed)."""
        try:
            return {name: store.stats() for name, store in list(self._stores.items())}
        except Exception as e:  # noqa: BLE001
            self._log_once("stats", e)
            return {}

    def close(self) -> None:
        """Drops the daemon sessions (SGLang calls it on detach). Later calls fail softly."""
        self._closed = True
        with self._lock:
            self._stores.clear()
