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
an asynchronous load; the worker reports it through get_finished (docs/engines.md, "vLLM").

Prefetch of queued requests: vLLM calls ``on_new_request`` when a request enters its queue; the
connector then asks the daemon to bring the request's disk-held chunks into memory in the
background, so that its later lookup and load find them there (``prefetch``).

Hybrid models (vLLM's hybrid memory allocator, ``SupportsHMA``): each KV-cache group has its own
native connector, layout and key space (strata_vllm.kv_groups). A request's hit is the shortest
of its groups' hits; when one group's load must wait for a lower tier, every group's does, and
the worker reports the request once every group has loaded it. Every hit of a hybrid model
loads asynchronously: vLLM cannot map a failed block of one group back to its request, so a
failed load comes back as the request's (``get_transfer_results``' ``failed_recving``) and
vLLM recomputes it.

A step's loads start, and its saves are planned, when vLLM binds the step's metadata, before
the forward pass: vLLM 0.32 calls ``start_load_kv`` after the forward unless the step has
synchronous loads, which would leave every save copy to ``wait_for_save``.

A failed load is a cache miss, never a failed request: unless ``kv_connector_extra_config``
says ``"load_failure_policy": "fail"``, the connector sets vLLM's ``kv_load_failure_policy`` to
``recompute`` (vLLM's default fails the request).

EAGLE-family drafters are not served: the draft model's KV at a chunk's last position depends
on the token after the chunk, which the chunk's key does not cover (vLLM drops the last block of
its own prefix hits for this). With one configured, the connector serves nothing and says so.

Multimodal prompts: a chunk's key covers each image's (or other input's) hash at its placeholder
positions (strata_vllm.prompt_keys), so requests with the same text and different images never
share KV; a prompt the keys cannot describe (prompt embeddings) is neither loaded nor saved.

Position-independent chunks (kv_transfer_params "strata_pic", strata_vllm.pic) need attention
over the daemon's device pool, which stock vLLM lacks: such requests are served by prefix
caching here, and a model runner with that attention plans them with strata_vllm.pic.PicPlanner.

Threading: vLLM calls the scheduler-side methods from its scheduler thread and the worker-side
methods from each worker's model-runner thread; one instance serves one role.
"""

from __future__ import annotations

import enum
import functools
import logging
from typing import Any, Callable, Iterable, Optional, TypeVar

import strata_connector as _sc

from strata_vllm.kv_groups import (
    VLLM_NULL_BLOCK_ID,
    KvGroup,
    UnsupportedKvCacheGroup,
    group_block_ids,
    kv_cache_groups,
)
from strata_vllm.kv_views import backend_name, layer_encoding, layer_views, page_encoding
from strata_vllm.pic import PIC_PARAMS_KEY
from strata_vllm.prompt_keys import key_tokens
from strata_vllm.vllm_types import (
    CONNECTOR_BASES,
    METADATA_BASES,
    KVConnectorStats,
    KVConnectorTransferResults,
    hit_source,
)

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


def _request_extras(request: Any) -> tuple[str, str]:
    salt = _get(request, "cache_salt") or ""
    lora = _get(request, "lora_request")
    lora_name = (_get(lora, "lora_name") or _get(lora, "name") or "") if lora is not None else ""
    return str(salt), str(lora_name)


class MalformedTransferParams(ValueError):
    """A request's kv_transfer_params that the connector cannot act on."""


def _kv_transfer(request: Any) -> tuple[str, str]:
    """(kv_transfer, node) of a request's kv_transfer_params, in the shape vLLM's
    NixlConnector uses: "send" for do_remote_decode (this engine prefills for a decoder), with
    the decoder's node when the params name it (decode_engine_id: Strata's extension, the node id
    of the decoder's daemon, to which the prefill streams its KV layer by layer as it computes;
    "" without it: the decoder fetches the KV once the prefill is done); "receive" with
    remote_engine_id (the prefiller's node) for do_remote_prefill; "none" without params. Raises
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
        decode_node = params.get("decode_engine_id", "")
        if not isinstance(decode_node, str):
            raise MalformedTransferParams(f"decode_engine_id is {decode_node!r}, not a node id")
        return "send", decode_node
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
    """The per-step metadata (KVConnectorMetadata shape): the binding's ConnectorMetadata of
    each KV-cache group, each pickled as its compact binary form."""

    def __init__(self, *natives: _sc.ConnectorMetadata):
        self.natives = list(natives) or [_sc.ConnectorMetadata()]

    @property
    def native(self) -> _sc.ConnectorMetadata:
        """The first group's metadata (the only one's, for a model with one group)."""
        return self.natives[0]

    def __reduce__(self):
        return (StrataConnectorMetadata, tuple(self.natives))


def options_from_vllm_config(vllm_config: Any, role: int) -> _sc.ConnectorOptions:
    """Builds connector options from a vLLM config (duck-typed)."""
    transfer = _get(vllm_config, "kv_transfer_config")
    extra = dict(_get(transfer, "kv_connector_extra_config", None) or {})
    model = _get(vllm_config, "model_config")
    cache = _get(vllm_config, "cache_config")
    parallel = _get(vllm_config, "parallel_config")

    extra.pop(LOAD_FAILURE_POLICY_KEY, None)  # vLLM's setting (_prefer_recompute)
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
    _apply_page_encoding(o, vllm_config)
    return o


def _apply_page_encoding(o: _sc.ConnectorOptions, vllm_config: Any) -> None:
    """Engines whose blocks are opaque pages (strata_vllm.kv_views.page_encoding) copy whole
    blocks only, under keys of their own encoding."""
    model, cache = _get(vllm_config, "model_config"), _get(vllm_config, "cache_config")
    base_id = o.model_id.partition("#page:")[0]  # the encoding always comes last
    encoding = page_encoding(_get(model, "dtype"), o.block_size, o.head_dim,
                             _get(cache, "cache_dtype", "auto"), o.kv_kind == "mla")
    o.whole_blocks_only = encoding is not None
    o.model_id = base_id if encoding is None else f"{base_id}#page:{encoding}"


def group_options(vllm_config: Any, role: int, group: KvGroup) -> _sc.ConnectorOptions:
    """The options of one KV-cache group of a hybrid model: the model's, with the group's
    layout (its layers, KV shape and dtype), block size and key space."""
    o = options_from_vllm_config(vllm_config, role)
    o.model_id = group.model_id(o.model_id.partition("#page:")[0])
    o.kv_kind = "mla" if group.use_mla else "mha"
    o.num_layers = len(group.layer_names)
    o.num_kv_heads = 1 if group.use_mla else group.num_kv_heads
    o.head_dim = group.head_size
    if group.dtype is not None and o.dtype != "fp8_e4m3":
        o.dtype = _dtype_name(group.dtype)  # an fp8 cache's spec says its storage type, uint8
    o.block_size = group.block_size
    o.null_block_id = VLLM_NULL_BLOCK_ID
    _apply_page_encoding(o, vllm_config)
    return o


def kv_cache_groups_or_none(kv_cache_config: Any, chunk_tokens: int) -> Any:
    """kv_cache_groups(), with a model whose groups cannot be cached logged (once, as an
    error) and served by no group: [] (every lookup a miss, nothing saved)."""
    try:
        return kv_cache_groups(kv_cache_config, chunk_tokens)
    except UnsupportedKvCacheGroup as error:
        logger.error("strata connector: %s; the connector serves nothing", error)
        return []


# kv_connector_extra_config key: "fail" keeps vLLM's kv_load_failure_policy as it is.
LOAD_FAILURE_POLICY_KEY = "load_failure_policy"


def _prefer_recompute(vllm_config: Any) -> None:
    """Sets vLLM's kv_load_failure_policy to "recompute" (a failed load is a miss) unless the
    connector's extra config asks for "fail". vLLM's scheduler reads the policy right after it
    creates its connector."""
    transfer = _get(vllm_config, "kv_transfer_config")
    extra = _get(transfer, "kv_connector_extra_config", None) or {}
    if extra.get(LOAD_FAILURE_POLICY_KEY, "recompute") == "fail":
        return
    if _get(transfer, "kv_load_failure_policy", "recompute") != "recompute":
        logger.info("strata connector: kv_load_failure_policy set to recompute (a failed load "
                    "is a cache miss; %s=fail in kv_connector_extra_config keeps vLLM's)",
                    LOAD_FAILURE_POLICY_KEY)
        transfer.kv_load_failure_policy = "recompute"


def _eagle_drafter(vllm_config: Any) -> bool:
    """Whether speculative decoding uses an EAGLE-family drafter (which has KV layers whose
    content at a position depends on the token after it)."""
    speculative = _get(vllm_config, "speculative_config")
    use_eagle = _get(speculative, "use_eagle")
    return bool(callable(use_eagle) and use_eagle())


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
        self._connector_metadata: Optional[StrataConnectorMetadata] = None
        self._warned: set[str] = set()
        self._stats_reported: dict[str, int] = {}
        # One native connector per KV-cache group (one, unless the model is hybrid): their
        # options, and (scheduler) their scheduler connectors or (worker, once the caches are
        # registered) their worker connectors. No groups: a model the connector cannot cache.
        model_options = options_from_vllm_config(vllm_config, self._role_value)
        self._groups = kv_cache_groups_or_none(kv_cache_config, model_options.chunk_tokens)
        if self._groups is None:
            self._options = [model_options]
        else:
            self._options = [group_options(vllm_config, self._role_value, g)
                             for g in self._groups]
        self._schedulers: list[_sc.SchedulerConnector] = []
        self._workers: list[_sc.WorkerConnector] = []
        self._layer_index: dict[str, tuple[int, int]] = {}  # name -> (group, layer in group)
        # Scheduler: per request with a hit, where it comes from (vLLM's cache-hit source).
        # Worker: per request, the groups whose asynchronous load has been reported, and the
        # requests one of whose groups failed; whether this step's loads have started.
        self._hit_sources: dict[str, str] = {}
        self._recv_reported: dict[str, int] = {}
        self._recv_failed: set[str] = set()
        self._step_started = False
        if _eagle_drafter(vllm_config):
            logger.error("strata connector: an EAGLE-family drafter is configured; its KV at a "
                         "chunk's last position depends on the next token, which chunk keys do "
                         "not cover, so the connector serves nothing")
            self._groups, self._options = [], []
        _prefer_recompute(vllm_config)
        if self._role_value == SCHEDULER:
            self._schedulers = [_sc.SchedulerConnector(o) for o in self._options]

    # ---- helpers ---------------------------------------------------------------------------

    @property
    def role(self) -> Any:
        return self._role

    @property
    def requires_kv_delivery(self) -> bool:
        """False: a cache, best effort; saves complete inside their step (a dropped one is a
        later miss), so nothing is handed off when a request completes."""
        return False

    def _warn_once(self, what: str, error: BaseException) -> None:
        if what not in self._warned:
            self._warned.add(what)
            logger.warning("strata connector: %s failed: %s", what, error)

    def _note_pic_request(self, request: Any) -> None:
        """A request that asks for position-independent chunks (strata_vllm.pic) is served by
        prefix caching: vLLM's attention reads only its own blocks. Said once."""
        params = _get(request, "kv_transfer_params")
        if "pic" in self._warned or not isinstance(params, dict) or PIC_PARAMS_KEY not in params:
            return
        self._warned.add("pic")
        logger.warning("strata connector: request %s asks for position-independent chunks "
                       "(%s); this engine's attention reads only its own blocks, so it is served "
                       "by prefix caching (strata_vllm.pic)", request.request_id, PIC_PARAMS_KEY)

    def _key_tokens(self, request: Any) -> Optional[list[int]]:
        """strata_vllm.prompt_keys.key_tokens; a prompt it cannot key is said once."""
        tokens = key_tokens(request)
        if tokens is None and "uncacheable" not in self._warned:
            self._warned.add("uncacheable")
            logger.warning("strata connector: request %s has inputs chunk keys cannot describe "
                           "(prompt embeddings, or a multimodal input without a hash or "
                           "position); such requests are neither loaded nor saved",
                           _get(request, "request_id", _get(request, "req_id")))
        return tokens

    def _engine_stream(self) -> Optional[int]:
        if not self._workers or self._workers[0].backend != "cuda":
            return None
        import torch  # only for CUDA engines, which have it

        return int(torch.cuda.current_stream().cuda_stream)

    # ---- worker side -----------------------------------------------------------------------

    def bind_connector_metadata(self, connector_metadata: StrataConnectorMetadata) -> None:
        """Binds the step's metadata and starts its loads and plans its saves (see the module
        docstring: vLLM may call start_load_kv only after the forward pass)."""
        self._connector_metadata = connector_metadata
        self._step_started = False
        self._start_step()

    def clear_connector_metadata(self) -> None:
        self._connector_metadata = None
        self._step_started = False

    def _get_connector_metadata(self) -> StrataConnectorMetadata:
        assert self._connector_metadata is not None
        return self._connector_metadata

    def has_connector_metadata(self) -> bool:
        return self._connector_metadata is not None

    def register_kv_caches(self, kv_caches: dict[str, Any]) -> None:
        """kv_caches: layer name -> the layer's paged KV, in layer order, in any of vLLM's forms
        (strata_vllm.kv_views): one [B, H, N, C] page view packing K and V (vLLM 0.32 on), one
        tensor [2, num_blocks, block_size, kv_heads, head_dim], a (K, V) pair of
        [num_blocks, block_size, kv_heads, head_dim] tensors, or an MLA latent tensor.

        Raises on caches the connector cannot use (a shape, stride or dtype that does not match
        the model's layout, a backend whose packing it does not know): that is a configuration
        error, found at start-up, not a cache failure; every later call is guarded."""
        if self._groups is None:
            names_per_group = [list(kv_caches)]
        else:
            names_per_group = [[n for n in g.layer_names if n in kv_caches] for g in self._groups]
        workers = []
        for group, (names, options) in enumerate(zip(names_per_group, self._options)):
            layers = []
            device = None
            wanted = options.model_id.partition("#page:")[2] or None
            for index, name in enumerate(names):
                self._layer_index[name] = (group, index)
                if wanted is not None and layer_encoding(self._vllm_config, name) != wanted:
                    raise ValueError(f"layer {name} keeps its blocks as "
                                     f"{layer_encoding(self._vllm_config, name)}, the "
                                     f"scheduler's keys say {wanted}")
                kv, v = layer_views(kv_caches[name], options.kv_kind == "mla", options.head_dim,
                                    backend_name(self._vllm_config, name))
                layers.append((_tensor_tuple(kv), None if v is None else _tensor_tuple(v)))
                device = device or _get(kv, "device")
            if options.device_backend == "auto":
                options.device_backend = (
                    "cuda" if _get(device, "type", "cpu") == "cuda" else "host")
            if options.device_backend == "cuda":
                options.device_ordinal = int(_get(device, "index", 0) or 0)
            options.num_layers = len(layers)
            worker = _sc.WorkerConnector(options)
            worker.register_kv_caches(layers)
            workers.append(worker)
        self._workers = workers

    def set_host_xfer_buffer_ops(self, copy_operation: Any) -> None:
        """Nothing to set: the connector copies between the engine and the daemon's arena."""
        return None

    @_guarded(_none)
    def handle_preemptions(self, kv_connector_metadata: Any) -> None:
        """Nothing to do: saves complete inside their step, so a preempted request's blocks
        are never read after the step that scheduled them."""
        return None

    def start_load_kv(self, forward_context: Any, **kwargs: Any) -> None:
        """Nothing left to do: bind_connector_metadata started the step."""
        self._start_step()

    @_guarded(_none)
    def _start_step(self) -> None:
        """Starts the bound step's loads and plans its saves, once. On failure the C++ side
        has already failed the loads' blocks."""
        if not self._workers or self._connector_metadata is None or self._step_started:
            return
        self._step_started = True
        natives = self._connector_metadata.natives
        if len(natives) != len(self._workers):
            raise ValueError(f"metadata of {len(natives)} KV-cache groups for "
                             f"{len(self._workers)}")
        stream = self._engine_stream()
        for worker, native in zip(self._workers, natives):
            worker.start_load_kv(native, stream)

    @_guarded(_none)
    def wait_for_layer_load(self, layer_name: str) -> None:
        if not self._workers:
            return
        group, index = self._layer_index[layer_name]
        self._workers[group].wait_for_layer_load(index)

    @_guarded(_none)
    def save_kv_layer(self, layer_name: str, kv_layer: Any, attn_metadata: Any,
                      **kwargs: Any) -> None:
        if not self._workers:
            return
        group, index = self._layer_index[layer_name]
        self._workers[group].save_kv_layer(index, self._engine_stream())

    @_guarded(_none)
    def wait_for_save(self) -> None:
        for worker in self._workers:
            worker.wait_for_save()

    def _take_finished(self, finished_req_ids: Optional[set[str]]
                       ) -> tuple[set[str], set[str], set[str]]:
        """(finished_sending, finished_recving, failed_recving) over every group: a request's
        asynchronous load is over once every group has reported it, failed if any group's
        failed."""
        finished = sorted(finished_req_ids or ())
        sending, recving, failed = set(), set(), set()
        for worker in self._workers:
            group_sending, group_recving, group_failed = worker.get_finished(finished)
            sending.update(group_sending)
            self._recv_failed.update(group_failed)
            for req_id in group_recving:
                reported = self._recv_reported.get(req_id, 0) + 1
                if reported < len(self._workers):
                    self._recv_reported[req_id] = reported
                    continue
                self._recv_reported.pop(req_id, None)
                recving.add(req_id)
                if req_id in self._recv_failed:
                    self._recv_failed.discard(req_id)
                    failed.add(req_id)
        return sending, recving, failed

    @_guarded(lambda: (None, None))
    def get_finished(self, finished_req_ids: set[str]
                     ) -> tuple[Optional[set[str]], Optional[set[str]]]:
        """(finished_sending, finished_recving), for vLLM before 0.32: saves complete inside
        the step (wait_for_save), so nothing is ever sending; finished_recving names the
        requests whose asynchronous loads are over (loaded, or failed: their blocks come from
        the get_block_ids_with_load_errors call that follows). Fallback (None, None): the loads
        stay pending for the next call."""
        sending, recving, _ = self._take_finished(finished_req_ids)
        return (sending or None, recving or None)

    @_guarded(lambda: KVConnectorTransferResults())
    def get_transfer_results(self, finished_req_ids: set[str]) -> KVConnectorTransferResults:
        """vLLM 0.32's get_finished: the same, and failed_recving. A model with one KV-cache
        group reports failed loads by block (get_block_ids_with_load_errors: vLLM recomputes
        from the first failed block on); a hybrid model, whose failed blocks vLLM cannot map
        to requests, by request (failed_recving: vLLM recomputes the request)."""
        sending, recving, failed = self._take_finished(finished_req_ids)
        return KVConnectorTransferResults(
            finished_sending=sending, finished_recving=recving,
            failed_recving=failed if len(self._workers) > 1 else set())

    @_guarded(set)
    def get_block_ids_with_load_errors(self) -> set[int]:
        """The blocks whose loads failed since the last call; always empty for a hybrid model
        (its failures come back by request, get_transfer_results)."""
        errors: set[int] = set()
        for worker in self._workers:
            errors.update(worker.get_block_ids_with_load_errors())
        return errors if len(self._workers) <= 1 else set()

    def shutdown(self) -> None:
        self._workers = []
        self._schedulers = []

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
        saves, lookups, prefetches, asynchronous loads, connected), summed over KV-cache
        groups ("connected": every group's connection is up); {} after shutdown."""
        total: dict[str, Any] = {}
        for source in self._workers or self._schedulers:
            for key, value in source.stats().items():
                if isinstance(value, bool):
                    total[key] = total.get(key, True) and value
                else:
                    total[key] = total.get(key, 0) + value
        return total

    @classmethod
    def build_kv_connector_stats(cls, data: Optional[dict[str, Any]] = None
                                 ) -> Optional[StrataKVConnectorStats]:
        """The stats object vLLM rebuilds from the data the workers sent."""
        return StrataKVConnectorStats(data=dict(data or {}))

    def get_kv_connector_kv_cache_events(self) -> None:
        """None: the daemon publishes KV events itself (docs/operations.md, "KV events")."""
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
        """None: the daemon serves its own Prometheus metrics (docs/operations.md, "Metrics")."""
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
        params are logged as an error and the request recomputes (0, False).

        A hybrid model's hit is its groups' shortest; when any group's load is asynchronous,
        every group's is."""
        if not self._schedulers:
            return 0, False
        salt, lora = _request_extras(request)
        try:
            kv_transfer, node = _kv_transfer(request)
        except MalformedTransferParams as error:
            logger.error("strata connector: request %s has malformed kv_transfer_params (%s): "
                         "%r; its prompt is recomputed", request.request_id, error,
                         _get(request, "kv_transfer_params"))
            return 0, False
        self._note_pic_request(request)
        req_id, prompt = str(request.request_id), self._key_tokens(request)
        if prompt is None:
            return 0, False
        source, decode = (node, "") if kv_transfer == "receive" else ("", node)
        matches = [s.get_num_new_matched_tokens(req_id, prompt, int(num_computed_tokens), salt,
                                                lora, kv_transfer, source, decode)
                   for s in self._schedulers]
        tokens = min(int(t) for t, _ in matches)
        lower_tier = any(a for _, a in matches)
        # A hybrid model's loads are all asynchronous (its failures come back by request).
        load_async = tokens > 0 and (lower_tier or len(self._schedulers) > 1)
        if load_async:
            for scheduler, (_, group_async) in zip(self._schedulers, matches):
                if not group_async:
                    scheduler.make_load_async(req_id)
        if tokens > 0:
            self._hit_sources[req_id] = ("p2p" if kv_transfer == "receive"
                                         else "disk" if lower_tier else "host")
        return tokens, load_async

    def get_external_cache_hit_sources(self, request: Any,
                                       num_external_tokens: int) -> dict[Any, int]:
        """Where a request's hit comes from, for vLLM's metrics: the daemon's memory
        ("host"), its disk or a peer it must first fetch from ("disk": an asynchronous load),
        or a prefiller's daemon ("p2p")."""
        if num_external_tokens <= 0:
            return {}
        source = self._hit_sources.get(str(request.request_id), "host")
        return {hit_source(source): int(num_external_tokens)}

    @_guarded(lambda: 0)
    def prefetch(self, request: Any) -> int:
        """Asks the daemon to promote the chunks of a queued request's prompt that it holds only
        on disk (or on peers). One round trip bounded by lookup_budget_ms; does not record the
        request. Returns how many chunks the daemon queued: 0 on the worker role, when nothing
        needed promotion, or when the daemon could not take the hint (a prefetch never
        raises)."""
        salt, lora = _request_extras(request)
        req_id, prompt = str(request.request_id), self._key_tokens(request)
        if prompt is None:
            return 0
        return sum(int(s.prefetch(req_id, prompt, salt, lora)) for s in self._schedulers)

    def on_new_request(self, request: Any) -> None:
        """vLLM queued a request: prefetch it (a hint; never raises)."""
        self.prefetch(request)

    @_guarded(_none)
    def update_state_after_alloc(self, request: Any, blocks: Any,
                                 num_external_tokens: int) -> None:
        """On failure the load is planned as failed: the worker reports its blocks for
        recompute (and, for an asynchronous load, the request)."""
        if not self._schedulers:
            return
        req_id = str(request.request_id)
        per_group = group_block_ids(blocks, len(self._schedulers))
        for scheduler, block_ids in zip(self._schedulers, per_group):
            scheduler.update_state_after_alloc(req_id, block_ids, int(num_external_tokens))

    def build_connector_meta(self, scheduler_output: Any) -> StrataConnectorMetadata:
        """Never raises. When the scheduler output cannot be read, the step's metadata still
        carries the loads planned so far (without saves): the engine reads those blocks this
        step, so they must be loaded or reported as failed."""
        groups = len(self._schedulers)
        if not groups:
            return StrataConnectorMetadata()
        try:
            requests = self._scheduled_requests(scheduler_output)
            finished = sorted(str(r) for r in
                              (_get(scheduler_output, "finished_req_ids", None) or ()))
        except Exception as error:
            self._warn_once("build_connector_meta (reading the scheduler output)", error)
            requests, finished = [[] for _ in range(groups)], []
        for req_id in finished:
            self._hit_sources.pop(req_id, None)
        natives = []
        for group, scheduler in enumerate(self._schedulers):
            try:
                natives.append(scheduler.build_connector_meta(requests[group], finished))
            except Exception as error:
                self._warn_once("build_connector_meta", error)
                natives.append(_sc.ConnectorMetadata())
        return StrataConnectorMetadata(*natives)

    def _scheduled_requests(self, scheduler_output: Any) -> list[list[Any]]:
        """The step's scheduled requests, one list per KV-cache group (each with its blocks)."""
        groups = len(self._schedulers)
        num_scheduled = dict(_get(scheduler_output, "num_scheduled_tokens", None) or {})
        requests: list[list[Any]] = [[] for _ in range(groups)]
        for new in _get(scheduler_output, "scheduled_new_reqs", None) or []:
            req_id = str(new.req_id)
            salt = str(_get(new, "cache_salt") or "")
            lora = str(_get(_get(new, "lora_request"), "lora_name", "") or "")
            prompt = self._key_tokens(new) or []  # none: not tracked, so never saved
            for group, block_ids in enumerate(group_block_ids(new.block_ids, groups)):
                requests[group].append(_sc.ScheduledRequest(
                    req_id, "new", int(new.num_computed_tokens),
                    int(num_scheduled.get(req_id, 0)), block_ids, prompt, salt, lora))
        for req_id, computed, new_blocks, resumed in self._cached_requests(
                _get(scheduler_output, "scheduled_cached_reqs")):
            for group, block_ids in enumerate(group_block_ids(new_blocks, groups)):
                requests[group].append(_sc.ScheduledRequest(
                    req_id, "resumed" if resumed else "running", int(computed),
                    int(num_scheduled.get(req_id, 0)), block_ids))
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
        return self.request_finished_all_groups(request, block_ids)

    @_guarded(lambda: (False, None))
    def request_finished_all_groups(self, request: Any, block_ids: Any
                                    ) -> tuple[bool, Optional[dict[str, Any]]]:
        """request_finished for a hybrid model (vLLM's SupportsHMA): block_ids holds each
        KV-cache group's blocks. Nothing is saved here (saves completed inside their steps),
        so the blocks may be freed now."""
        if not self._schedulers:
            return False, None
        req_id = str(request.request_id)
        self._hit_sources.pop(req_id, None)
        per_group = group_block_ids(block_ids, len(self._schedulers))
        keep = False
        for scheduler, ids in zip(self._schedulers, per_group):
            keep = scheduler.request_finished(req_id, ids) or keep
        try:
            kv_transfer, _ = _kv_transfer(request)
        except MalformedTransferParams:
            kv_transfer = "none"  # already logged by get_num_new_matched_tokens
        if kv_transfer != "send":
            return bool(keep), None
        node_id, address = self._schedulers[0].daemon_node()
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
