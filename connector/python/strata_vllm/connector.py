"""The vLLM KV connector backed by the Strata daemon.

vLLM loads it by name, unmodified::

    vllm serve MODEL --kv-transfer-config '{"kv_connector": "StrataConnector",
        "kv_connector_module_path": "strata_vllm", "kv_role": "kv_both",
        "kv_connector_extra_config": {"socket_path": "/run/strata/engine.sock"}}'

``StrataConnector`` subclasses vLLM's ``KVConnectorBase_V1`` when vLLM is importable (see
strata_vllm.vllm_types) and is duck-typed otherwise, with the same methods, names and signatures.
It delegates to the ``strata_connector`` binding of the C++ connector
(connector/include/strata/connector.h). It imports neither vLLM nor torch unless they are there
(torch only when the KV caches live on a CUDA device): every vLLM object it receives is used by
duck typing.

Configuration comes from ``vllm_config.kv_transfer_config.kv_connector_extra_config`` (keys
named like strata_connector.ConnectorOptions fields, e.g. ``socket_path``, ``hash_algorithm``,
``chunk_tokens``, ``lookup_budget_ms``, ``async_loads``) over what the model, cache and parallel
configs say.

The connector never takes the engine down: every public method is guarded. A failure is logged
once per method and the method returns its documented fallback: lookups report 0 hits, failed
loads come back from get_block_ids_with_load_errors and are recomputed, saves are skipped.

Asynchronous loads: a hit the daemon must first bring up from its disk (or a peer) is offered as
an asynchronous load; the worker reports it through get_finished (README, "Asynchronous loads").

Prefetch of queued requests: vLLM calls ``on_new_request`` when a request enters its queue; the
connector then asks the daemon to bring the request's disk-held chunks into memory in the
background, so that its later lookup and load find them there (``prefetch``).

Threading: vLLM calls the scheduler-side methods from its scheduler thread and the worker-side
methods from each worker's model-runner thread; one instance serves one role.
"""

from __future__ import annotations

import enum
import functools
import logging
from typing import Any, Callable, Iterable, Optional, TypeVar

import strata_connector as _sc

from strata_vllm.vllm_types import CONNECTOR_BASES, METADATA_BASES, KVConnectorStats

logger = logging.getLogger("strata_vllm")

# vLLM's KVConnectorRole values.
SCHEDULER = 0
WORKER = 1


def _role_value(role: Any) -> int:
    """KVConnectorRole, its name or its value -> SCHEDULER / WORKER."""
    if isinstance(role, enum.Enum):
        role = role.name
    if isinstance(role, str):
        name = role.upper()
        if name in ("SCHEDULER", "WORKER"):
            return SCHEDULER if name == "SCHEDULER" else WORKER
        raise ValueError(f"unknown connector role {role!r}")
    if role in (SCHEDULER, WORKER):
        return int(role)
    raise ValueError(f"unknown connector role {role!r}")


def _dtype_name(dtype: Any) -> str:
    """A torch dtype, its name or a vLLM cache_dtype -> the canonical name ("bf16", ...); the
    names are parsed in C++ (core/kv_layout.h), like every other front end's."""
    return _sc.canonical_dtype(str(dtype))


def _get(obj: Any, name: str, default: Any = None) -> Any:
    return getattr(obj, name, default) if obj is not None else default


def _flat_block_ids(block_ids: Any) -> list[int]:
    """vLLM gives block ids per KV-cache group (tuple of lists) or flat; one group is supported."""
    if block_ids is None:
        return []
    if hasattr(block_ids, "get_block_ids"):  # KVCacheBlocks
        block_ids = block_ids.get_block_ids()
    block_ids = list(block_ids)
    if block_ids and isinstance(block_ids[0], (list, tuple)):
        if len(block_ids) > 1:
            raise ValueError("strata connector supports one KV-cache group")
        block_ids = list(block_ids[0])
    return [int(b) for b in block_ids]


def _request_extras(request: Any) -> tuple[str, str]:
    salt = _get(request, "cache_salt") or ""
    lora = _get(request, "lora_request")
    lora_name = (_get(lora, "lora_name") or _get(lora, "name") or "") if lora is not None else ""
    return str(salt), str(lora_name)


class MalformedTransferParams(ValueError):
    """A request's kv_transfer_params that the connector cannot act on."""


def _kv_transfer(request: Any) -> tuple[str, str]:
    """(kv_transfer, source_node) of a request's kv_transfer_params, in the shape vLLM's
    NixlConnector uses: "send" for do_remote_decode (this engine prefills for a decoder),
    "receive" with remote_engine_id for do_remote_prefill, "none" without params. Raises
    MalformedTransferParams naming what is wrong."""
    params = _get(request, "kv_transfer_params")
    if params is None:
        return "none", ""
    if not isinstance(params, dict):
        raise MalformedTransferParams(f"not a dict but {type(params).__name__}")
    decode, prefill = params.get("do_remote_decode", False), params.get("do_remote_prefill", False)
    for name, value in (("do_remote_decode", decode), ("do_remote_prefill", prefill)):
        if not isinstance(value, bool):
            raise MalformedTransferParams(f"{name} is {value!r}, not a bool")
    if decode and prefill:
        raise MalformedTransferParams("both do_remote_decode and do_remote_prefill are set")
    if decode:
        return "send", ""
    if not prefill:
        return "none", ""
    source = params.get("remote_engine_id")
    if not isinstance(source, str) or not source:
        raise MalformedTransferParams(f"remote_engine_id is {source!r}, not a node id")
    port = params.get("remote_port")
    if port is not None and (not isinstance(port, int) or isinstance(port, bool)
                             or not 0 < port < 65536):
        raise MalformedTransferParams(f"remote_port is {port!r}")
    return "receive", source


def _tensor_tuple(tensor: Any) -> tuple[int, list[int], list[int]]:
    return int(tensor.data_ptr()), [int(s) for s in tensor.shape], [int(s) for s in tensor.stride()]


class StrataConnectorMetadata(*METADATA_BASES):
    """The per-step metadata (KVConnectorMetadata shape): wraps the binding's
    ConnectorMetadata, which pickles as its compact binary form."""

    def __init__(self, native: Optional[_sc.ConnectorMetadata] = None):
        self.native = native if native is not None else _sc.ConnectorMetadata()

    def __reduce__(self):
        return (StrataConnectorMetadata, (self.native,))


def options_from_vllm_config(vllm_config: Any, role: int) -> _sc.ConnectorOptions:
    """Builds connector options from a vLLM config (duck-typed)."""
    transfer = _get(vllm_config, "kv_transfer_config")
    extra = dict(_get(transfer, "kv_connector_extra_config", None) or {})
    model = _get(vllm_config, "model_config")
    cache = _get(vllm_config, "cache_config")
    parallel = _get(vllm_config, "parallel_config")

    o = _sc.ConnectorOptions()
    o.model_id = str(extra.pop("model_id", _get(model, "model", "")))
    use_mla = bool(_get(model, "use_mla", False))
    o.kv_kind = "mla" if use_mla else "mha"
    if model is not None and hasattr(model, "get_num_layers"):
        o.num_layers = int(model.get_num_layers(parallel))
        o.num_kv_heads = 1 if use_mla else int(model.get_num_kv_heads(parallel))
        o.head_dim = int(model.get_head_size())
    cache_dtype = _get(cache, "cache_dtype", "auto")
    o.dtype = _dtype_name(_get(model, "dtype") if cache_dtype in (None, "auto") else cache_dtype)
    tp_size = int(_get(parallel, "tensor_parallel_size", 1) or 1)
    o.tp_world_size = tp_size
    o.tp_rank = 0 if role == SCHEDULER else int(_get(parallel, "rank", 0) or 0) % tp_size
    o.block_size = int(_get(cache, "block_size", 16))
    kv_role = _get(transfer, "kv_role", "kv_both")
    o.enable_load = kv_role != "kv_producer"
    o.enable_save = kv_role != "kv_consumer"
    # vLLM handles asynchronous loads: hits the daemon must first bring up from its disk (or a
    # peer) load between steps instead of stalling the forward pass.
    o.async_loads = True
    # Explicit settings win.
    for key, value in extra.items():
        if not hasattr(o, key):
            raise ValueError(f"unknown strata connector option {key!r}")
        setattr(o, key, value)
    if role == SCHEDULER:
        o.tp_rank = int(extra.get("scheduler_tp_rank", 0)) if "scheduler_tp_rank" in extra else 0
    return o


_Method = TypeVar("_Method", bound=Callable[..., Any])


def _guarded(fallback: Callable[[], Any]) -> Callable[[_Method], _Method]:
    """Makes a public method return fallback() instead of raising (logged once per method)."""

    def wrap(method: _Method) -> _Method:
        @functools.wraps(method)
        def guarded(self: "StrataConnector", *args: Any, **kwargs: Any) -> Any:
            try:
                return method(self, *args, **kwargs)
            except Exception as error:  # the engine must never go down for the cache
                self._warn_once(method.__name__, error)
                return fallback()

        return guarded  # type: ignore[return-value]

    return wrap


def _none() -> None:
    return None


class StrataKVConnectorStats(KVConnectorStats):
    """The connector's counters over one interval (vLLM's KVConnectorStats): ``data`` maps a
    counter name (the binding's stats() keys: chunks_loaded, bytes_saved, lookups, ...) to how
    much it grew. Workers' stats aggregate by summing."""

    def reset(self) -> None:
        self.data = {}

    def aggregate(self, other: KVConnectorStats) -> "StrataKVConnectorStats":
        for key, value in (other.data or {}).items():
            self.data[key] = self.data.get(key, 0) + value
        return self

    def reduce(self) -> dict[str, int | float]:
        return dict(self.data)

    def is_empty(self) -> bool:
        return not any(self.data.values())


class StrataConnector(*CONNECTOR_BASES):  # type: ignore[misc]
    """vLLM's KVConnectorBase_V1 over the Strata daemon (see the module docstring)."""

    def __init__(self, vllm_config: Any, role: Any, kv_cache_config: Any = None):
        if CONNECTOR_BASES:
            # vLLM's base keeps the configs and the role (and logs that the API is experimental).
            super().__init__(vllm_config, role, kv_cache_config)
        self._vllm_config = vllm_config
        self._kv_cache_config = kv_cache_config
        self._role_value = _role_value(role)
        self._role = role
        self._options = options_from_vllm_config(vllm_config, self._role_value)
        self._connector_metadata: Optional[StrataConnectorMetadata] = None
        self._scheduler: Optional[_sc.SchedulerConnector] = None
        self._worker: Optional[_sc.WorkerConnector] = None
        self._layer_index: dict[str, int] = {}
        self._warned: set[str] = set()
        self._stats_reported: dict[str, int] = {}
        self.use_eagle_prefix_cache_hashing = False
        if self._role_value == SCHEDULER:
            self._scheduler = _sc.SchedulerConnector(self._options)

    # ---- helpers ---------------------------------------------------------------------------

    @property
    def role(self) -> Any:
        return self._role

    @property
    def prefer_cross_layer_blocks(self) -> bool:
        """False: the connector copies per layer, so that a layer's loads overlap the
        attention of the layers before it."""
        return False

    @property
    def supports_eagle_prefix_cache_hashing(self) -> bool:
        """False: chunk keys are the connector's own (core/key_hasher), whatever vLLM's
        prefix-cache hashes are."""
        return False

    def set_eagle_prefix_cache_hashing(self, enabled: bool) -> None:
        self.use_eagle_prefix_cache_hashing = enabled

    @property
    def requires_kv_delivery(self) -> bool:
        """False: a cache, best effort; saves complete inside their step (a dropped one is a
        later miss), so nothing is handed off when a request completes."""
        return False

    def _warn_once(self, what: str, error: BaseException) -> None:
        if what not in self._warned:
            self._warned.add(what)
            logger.warning("strata connector: %s failed: %s", what, error)

    def _engine_stream(self) -> Optional[int]:
        if self._worker is None or self._worker.backend != "cuda":
            return None
        import torch  # only for CUDA engines, which have it

        return int(torch.cuda.current_stream().cuda_stream)

    # ---- worker side -----------------------------------------------------------------------

    def bind_connector_metadata(self, connector_metadata: StrataConnectorMetadata) -> None:
        self._connector_metadata = connector_metadata

    def clear_connector_metadata(self) -> None:
        self._connector_metadata = None

    def _get_connector_metadata(self) -> StrataConnectorMetadata:
        assert self._connector_metadata is not None
        return self._connector_metadata

    def has_connector_metadata(self) -> bool:
        return self._connector_metadata is not None

    def register_kv_caches(self, kv_caches: dict[str, Any]) -> None:
        """kv_caches: layer name -> the layer's paged KV, in layer order: one tensor
        [2, num_blocks, block_size, kv_heads, head_dim] (FlashAttention), a (K, V) pair of
        [num_blocks, block_size, kv_heads, head_dim] tensors, or an MLA latent tensor.

        Raises on caches the connector cannot use (a shape, stride or dtype that does not match
        the model's layout): that is a configuration error, found at start-up, not a cache
        failure; every later call is guarded."""
        layers = []
        device = None
        for index, (name, cache) in enumerate(kv_caches.items()):
            self._layer_index[name] = index
            if isinstance(cache, (list, tuple)):
                key, value = cache
                layers.append((_tensor_tuple(key), _tensor_tuple(value)))
                device = device or _get(key, "device")
            else:
                layers.append((_tensor_tuple(cache), None))
                device = device or _get(cache, "device")
        if self._options.device_backend == "auto":
            self._options.device_backend = (
                "cuda" if _get(device, "type", "cpu") == "cuda" else "host")
        if self._options.device_backend == "cuda":
            self._options.device_ordinal = int(_get(device, "index", 0) or 0)
        self._worker = _sc.WorkerConnector(self._options)
        self._worker.register_kv_caches(layers)

    def register_cross_layers_kv_cache(self, kv_cache: Any, attn_backend: Any) -> None:
        """Not used: vLLM calls it only for connectors that prefer cross-layer blocks."""
        raise NotImplementedError("the strata connector registers per-layer caches")

    def set_host_xfer_buffer_ops(self, copy_operation: Any) -> None:
        """Nothing to set: the connector copies between the engine and the daemon's arena."""
        return None

    @_guarded(_none)
    def handle_preemptions(self, kv_connector_metadata: Any) -> None:
        """Nothing to do: saves complete inside their step, so a preempted request's blocks
        are never read after the step that scheduled them."""
        return None

    @_guarded(_none)
    def start_load_kv(self, forward_context: Any, **kwargs: Any) -> None:
        """On failure the C++ side has already failed the loads' blocks."""
        if self._worker is None or self._connector_metadata is None:
            return
        self._worker.start_load_kv(self._connector_metadata.native, self._engine_stream())

    @_guarded(_none)
    def wait_for_layer_load(self, layer_name: str) -> None:
        if self._worker is None:
            return
        self._worker.wait_for_layer_load(self._layer_index[layer_name])

    @_guarded(_none)
    def save_kv_layer(self, layer_name: str, kv_layer: Any, attn_metadata: Any,
                      **kwargs: Any) -> None:
        if self._worker is None:
            return
        self._worker.save_kv_layer(self._layer_index[layer_name], self._engine_stream())

    @_guarded(_none)
    def wait_for_save(self) -> None:
        if self._worker is None:
            return
        self._worker.wait_for_save()

    @_guarded(lambda: (None, None))
    def get_finished(self, finished_req_ids: set[str]
                     ) -> tuple[Optional[set[str]], Optional[set[str]]]:
        """(finished_sending, finished_recving): saves complete inside the step (wait_for_save),
        so nothing is ever sending; finished_recving names the requests whose asynchronous loads
        are over (loaded, or failed: their blocks come from the get_block_ids_with_load_errors
        call that follows). Fallback (None, None): the loads stay pending for the next call."""
        if self._worker is None:
            return None, None
        sending, recving = self._worker.get_finished(sorted(finished_req_ids or ()))
        return (set(sending) or None, set(recving) or None)

    @_guarded(set)
    def get_block_ids_with_load_errors(self) -> set[int]:
        if self._worker is None:
            return set()
        return set(self._worker.get_block_ids_with_load_errors())

    def shutdown(self) -> None:
        self._worker = None
        self._scheduler = None

    @_guarded(_none)
    def get_kv_connector_stats(self) -> Optional[StrataKVConnectorStats]:
        """What the counters of this role's connector grew by since the last call; None when
        nothing changed."""
        now = {key: int(value) for key, value in self.stats().items()
               if not isinstance(value, bool)}
        grown = {key: value - self._stats_reported.get(key, 0) for key, value in now.items()}
        self._stats_reported = now
        stats = StrataKVConnectorStats(data={k: v for k, v in grown.items() if v})
        return None if stats.is_empty() else stats

    def stats(self) -> dict[str, Any]:
        """This role's counters since the connector started (the binding's stats(): loads,
        saves, lookups, prefetches, asynchronous loads, connected); {} after shutdown."""
        source = self._worker if self._worker is not None else self._scheduler
        return dict(source.stats()) if source is not None else {}

    @classmethod
    def build_kv_connector_stats(cls, data: Optional[dict[str, Any]] = None
                                 ) -> Optional[StrataKVConnectorStats]:
        """The stats object vLLM rebuilds from the data the workers sent."""
        return StrataKVConnectorStats(data=dict(data or {}))

    def get_kv_connector_kv_cache_events(self) -> None:
        """None: the daemon publishes KV events itself (README, "KV events")."""
        return None

    def get_handshake_metadata(self) -> None:
        return None

    def build_connector_worker_meta(self) -> None:
        return None

    def set_xfer_handshake_metadata(self, metadata: dict[int, Any]) -> None:
        return None

    def set_xfer_handshake_metadata_pp_aware(self, metadata: dict[tuple[int, int], Any]) -> None:
        return None

    @classmethod
    def build_prom_metrics(cls, vllm_config: Any, metric_types: dict[Any, Any],
                           labelnames: list[str],
                           per_engine_labelvalues: dict[int, list[object]]) -> None:
        """None: the daemon serves its own Prometheus metrics (README, "Metrics")."""
        return None

    def get_finished_count(self) -> Optional[int]:
        """None: every worker reports its own asynchronous loads (vLLM waits for all)."""
        return None

    # ---- scheduler side --------------------------------------------------------------------

    def bind_gpu_block_pool(self, gpu_block_pool: Any) -> None:
        return None

    @_guarded(lambda: (0, False))
    def get_num_new_matched_tokens(self, request: Any,
                                   num_computed_tokens: int) -> tuple[int, bool]:
        """(tokens the cache adds, whether they load asynchronously); fallback (0, False).

        Disaggregated prefill: a request whose kv_transfer_params say do_remote_prefill loads
        its prompt from the prefiller's node (remote_engine_id) asynchronously; malformed
        params are logged as an error and the request recomputes (0, False)."""
        if self._scheduler is None:
            return 0, False
        salt, lora = _request_extras(request)
        try:
            kv_transfer, source = _kv_transfer(request)
        except MalformedTransferParams as error:
            logger.error("strata connector: request %s has malformed kv_transfer_params (%s): "
                         "%r; its prompt is recomputed", request.request_id, error,
                         _get(request, "kv_transfer_params"))
            return 0, False
        tokens, load_async = self._scheduler.get_num_new_matched_tokens(
            str(request.request_id), list(request.prompt_token_ids),
            int(num_computed_tokens), salt, lora, kv_transfer, source)
        return int(tokens), bool(load_async)

    @_guarded(lambda: 0)
    def prefetch(self, request: Any) -> int:
        """Asks the daemon to promote the chunks of a queued request's prompt that it holds only
        on disk (or on peers). One round trip bounded by lookup_budget_ms; does not record the
        request. Returns how many chunks the daemon queued: 0 on the worker role, when nothing
        needed promotion, or when the daemon could not take the hint (a prefetch never
        raises)."""
        if self._scheduler is None:
            return 0
        salt, lora = _request_extras(request)
        return int(self._scheduler.prefetch(str(request.request_id),
                                            list(request.prompt_token_ids), salt, lora))

    def on_new_request(self, request: Any) -> None:
        """vLLM queued a request: prefetch it (a hint; never raises)."""
        self.prefetch(request)

    @_guarded(_none)
    def update_state_after_alloc(self, request: Any, blocks: Any,
                                 num_external_tokens: int) -> None:
        """On failure the load is planned as failed: the worker reports its blocks for
        recompute (and, for an asynchronous load, the request)."""
        if self._scheduler is None:
            return
        self._scheduler.update_state_after_alloc(
            str(request.request_id), _flat_block_ids(blocks), int(num_external_tokens))

    def build_connector_meta(self, scheduler_output: Any) -> StrataConnectorMetadata:
        """Never raises. When the scheduler output cannot be read, the step's metadata still
        carries the loads planned so far (without saves): the engine reads those blocks this
        step, so they must be loaded or reported as failed."""
        if self._scheduler is None:
            return StrataConnectorMetadata()
        try:
            requests = self._scheduled_requests(scheduler_output)
            finished = sorted(str(r) for r in
                              (_get(scheduler_output, "finished_req_ids", None) or ()))
        except Exception as error:
            self._warn_once("build_connector_meta (reading the scheduler output)", error)
            requests, finished = [], []
        try:
            return StrataConnectorMetadata(
                self._scheduler.build_connector_meta(requests, finished))
        except Exception as error:
            self._warn_once("build_connector_meta", error)
            return StrataConnectorMetadata()

    def _scheduled_requests(self, scheduler_output: Any) -> list[Any]:
        num_scheduled = dict(_get(scheduler_output, "num_scheduled_tokens", None) or {})
        requests = []
        for new in _get(scheduler_output, "scheduled_new_reqs", None) or []:
            req_id = str(new.req_id)
            salt = _get(new, "cache_salt") or ""
            lora = _get(new, "lora_request")
            requests.append(_sc.ScheduledRequest(
                req_id, "new", int(new.num_computed_tokens), int(num_scheduled.get(req_id, 0)),
                _flat_block_ids(new.block_ids), list(_get(new, "prompt_token_ids", None) or []),
                str(salt), str(_get(lora, "lora_name", "") or "")))
        for req_id, computed, new_blocks, resumed in self._cached_requests(
                _get(scheduler_output, "scheduled_cached_reqs")):
            requests.append(_sc.ScheduledRequest(
                req_id, "resumed" if resumed else "running", int(computed),
                int(num_scheduled.get(req_id, 0)), _flat_block_ids(new_blocks)))
        return requests

    @staticmethod
    def _cached_requests(cached: Any) -> Iterable[tuple[str, int, Any, bool]]:
        """(req_id, num_computed_tokens, new_block_ids, resumed) of scheduled_cached_reqs, in
        both of vLLM's forms: a list of per-request objects, or one object of parallel lists."""
        if cached is None:
            return
        if isinstance(cached, (list, tuple)):
            for req in cached:
                yield (str(req.req_id), req.num_computed_tokens, _get(req, "new_block_ids"),
                       bool(_get(req, "resumed_from_preemption", False)))
            return
        req_ids = list(_get(cached, "req_ids", None) or [])
        resumed_flags = _get(cached, "resumed_from_preemption", None)
        resumed_ids = set(_get(cached, "resumed_req_ids", None) or ())
        for i, req_id in enumerate(req_ids):
            resumed = (bool(resumed_flags[i]) if resumed_flags is not None
                       else req_id in resumed_ids)
            yield (str(req_id), cached.num_computed_tokens[i], cached.new_block_ids[i], resumed)

    def update_connector_output(self, connector_output: Any) -> None:
        return None

    @_guarded(lambda: (False, None))
    def request_finished(self, request: Any,
                         block_ids: list[int]) -> tuple[bool, Optional[dict[str, Any]]]:
        """(keep_blocks, kv_transfer_params). The blocks may always be freed now: saves
        completed inside their steps, into the daemon's memory. For a request this engine
        prefilled for a decoder (do_remote_decode), the params tell the decoder where the KV
        is, in NixlConnector's shape: do_remote_prefill, remote_engine_id (the node id of this
        engine's daemon), remote_host and remote_port (where that daemon's peers reach it) and
        remote_block_ids (empty: Strata finds KV by content, not by block). None when the
        daemon has no remote tier (logged: the decoder then recomputes)."""
        if self._scheduler is None:
            return False, None
        keep = self._scheduler.request_finished(str(request.request_id),
                                                _flat_block_ids(block_ids))
        try:
            kv_transfer, _ = _kv_transfer(request)
        except MalformedTransferParams:
            kv_transfer = "none"  # already logged by get_num_new_matched_tokens
        if kv_transfer != "send":
            return bool(keep), None
        node_id, address = self._scheduler.daemon_node()
        if not node_id:
            self._warn_once("request_finished (kv_transfer_params)", RuntimeError(
                "the daemon has no remote tier ([remote] listen_address): a decoder cannot "
                "fetch this prefill"))
            return bool(keep), None
        host, _, port = address.rpartition(":")
        return bool(keep), {"do_remote_prefill": True, "do_remote_decode": False,
                            "remote_engine_id": node_id, "remote_host": host.strip("[]"),
                            "remote_port": int(port), "remote_block_ids": []}

    def take_events(self) -> Iterable[Any]:
        return ()

    def has_pending_push_work(self) -> bool:
        return False

    def reset_cache(self) -> None:
        """None: the daemon's cache is shared by every engine on the node; clearing it is an
        operator's call (strata clear), not one engine's."""
        return None

    @classmethod
    def get_required_kvcache_layout(cls, vllm_config: Any) -> Optional[str]:
        return None

    @classmethod
    def requires_piecewise_for_cudagraph(cls, extra_config: dict[str, Any]) -> bool:
        """True: wait_for_layer_load / save_kv_layer run between layers, which a full CUDA
        graph's replay would skip."""
        return True
