"""A vLLM KV connector (KVConnectorBase_V1 shape) backed by the Strata daemon.

StrataConnector has the methods, names and signatures of vLLM's
``vllm.distributed.kv_transfer.kv_connector.v1.base.KVConnectorBase_V1`` and delegates to the
``strata_connector`` binding of the C++ connector (connector/include/strata/connector.h). It does
not import vLLM (or torch, unless the KV caches live on a CUDA device): every vLLM object it
receives is used by duck typing, so it runs against any object with the same attributes. To plug
it into vLLM, mix it with the real base class::

    from vllm.distributed.kv_transfer.kv_connector.v1.base import KVConnectorBase_V1
    StrataVllmConnector = make_vllm_connector_class(KVConnectorBase_V1)

Configuration comes from ``vllm_config.kv_transfer_config.kv_connector_extra_config`` (keys
named like strata_connector.ConnectorOptions fields, e.g. ``socket_path``, ``hash_algorithm``,
``chunk_tokens``, ``lookup_budget_ms``) over what the model, cache and parallel configs say.

The connector never takes the engine down: every call into the binding is guarded; an error is
logged once per kind and the engine carries on (lookups report 0 hits, failed loads come back
from get_block_ids_with_load_errors and are recomputed).

Prefetch of queued requests: the daemon can bring a request's chunks back from its disk tier
while the request waits, so that its later lookup and load find them in memory. vLLM's
KVConnectorBase_V1 has no hook for a request entering the waiting queue (its scheduler-side
methods are get_num_new_matched_tokens, which vLLM expects to be free of side effects,
update_state_after_alloc, build_connector_meta, update_connector_output, request_finished and
take_events), so the adapter does not prefetch by itself. An engine integration that wants it
calls ``connector.prefetch(request)`` from the scheduler thread when it queues a request, e.g.
from a Scheduler subclass's ``add_request`` after the base class has queued it::

    class StrataScheduler(Scheduler):
        def add_request(self, request):
            super().add_request(request)
            self.connector.prefetch(request)

Threading: vLLM calls the scheduler-side methods from its scheduler thread and the worker-side
methods from each worker's model-runner thread; one instance serves one role.
"""

from __future__ import annotations

import enum
import logging
from typing import Any, Iterable, Optional

import strata_connector as _sc

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


def _tensor_tuple(tensor: Any) -> tuple[int, list[int], list[int]]:
    return int(tensor.data_ptr()), [int(s) for s in tensor.shape], [int(s) for s in tensor.stride()]


class StrataConnectorMetadata:
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


class StrataConnector:
    """KVConnectorBase_V1-shaped connector (see the module docstring)."""

    def __init__(self, vllm_config: Any, role: Any, kv_cache_config: Any = None):
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
        if self._role_value == SCHEDULER:
            self._scheduler = _sc.SchedulerConnector(self._options)

    # ---- helpers ---------------------------------------------------------------------------

    @property
    def role(self) -> Any:
        return self._role

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
        [num_blocks, block_size, kv_heads, head_dim] tensors, or an MLA latent tensor."""
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

    def start_load_kv(self, forward_context: Any, **kwargs: Any) -> None:
        if self._worker is None or self._connector_metadata is None:
            return
        try:
            self._worker.start_load_kv(self._connector_metadata.native, self._engine_stream())
        except Exception as error:  # the C++ side has already failed the loads' blocks
            self._warn_once("start_load_kv", error)

    def wait_for_layer_load(self, layer_name: str) -> None:
        if self._worker is None:
            return
        try:
            self._worker.wait_for_layer_load(self._layer_index[layer_name])
        except Exception as error:
            self._warn_once("wait_for_layer_load", error)

    def save_kv_layer(self, layer_name: str, kv_layer: Any, attn_metadata: Any,
                      **kwargs: Any) -> None:
        if self._worker is None:
            return
        try:
            self._worker.save_kv_layer(self._layer_index[layer_name], self._engine_stream())
        except Exception as error:
            self._warn_once("save_kv_layer", error)

    def wait_for_save(self) -> None:
        if self._worker is None:
            return
        try:
            self._worker.wait_for_save()
        except Exception as error:
            self._warn_once("wait_for_save", error)

    def get_finished(self, finished_req_ids: set[str]
                     ) -> tuple[Optional[set[str]], Optional[set[str]]]:
        """(finished_sending, finished_recving): saves complete inside the step (wait_for_save),
        so nothing is ever sending; finished_recving names the requests whose asynchronous loads
        are over (loaded, or failed: their blocks come from the get_block_ids_with_load_errors
        call that follows). Never raises: a failure reports nothing this step, and the loads
        stay pending for the next call."""
        if self._worker is None:
            return None, None
        try:
            sending, recving = self._worker.get_finished(sorted(finished_req_ids or ()))
        except Exception as error:
            self._warn_once("get_finished", error)
            return None, None
        return (set(sending) or None, set(recving) or None)

    def get_block_ids_with_load_errors(self) -> set[int]:
        if self._worker is None:
            return set()
        try:
            return set(self._worker.get_block_ids_with_load_errors())
        except Exception as error:
            self._warn_once("get_block_ids_with_load_errors", error)
            return set()

    def shutdown(self) -> None:
        self._worker = None
        self._scheduler = None

    def get_kv_connector_stats(self) -> Optional[dict]:
        if self._worker is not None:
            return self._worker.stats()
        if self._scheduler is not None:
            return self._scheduler.stats()
        return None

    # ---- scheduler side --------------------------------------------------------------------

    def get_num_new_matched_tokens(self, request: Any,
                                   num_computed_tokens: int) -> tuple[int, bool]:
        if self._scheduler is None:
            return 0, False
        salt, lora = _request_extras(request)
        try:
            tokens, load_async = self._scheduler.get_num_new_matched_tokens(
                str(request.request_id), list(request.prompt_token_ids),
                int(num_computed_tokens), salt, lora)
        except Exception as error:
            self._warn_once("get_num_new_matched_tokens", error)
            return 0, False
        return int(tokens), bool(load_async)

    def prefetch(self, request: Any) -> int:
        """Asks the daemon to promote the chunks of a queued request's prompt that it holds only
        on disk (see the module docstring for when to call it). One round trip bounded by
        lookup_budget_ms; does not record the request. Returns how many chunks the daemon
        queued: 0 on the worker role, when nothing needed promotion, or when the daemon could
        not take the hint (a prefetch never raises)."""
        if self._scheduler is None:
            return 0
        salt, lora = _request_extras(request)
        try:
            return int(self._scheduler.prefetch(str(request.request_id),
                                                list(request.prompt_token_ids), salt, lora))
        except Exception as error:
            self._warn_once("prefetch", error)
            return 0

    def update_state_after_alloc(self, request: Any, blocks: Any,
                                 num_external_tokens: int) -> None:
        if self._scheduler is None:
            return
        try:
            self._scheduler.update_state_after_alloc(
                str(request.request_id), _flat_block_ids(blocks), int(num_external_tokens))
        except Exception as error:
            # The load is planned as failed: the worker reports its blocks for recompute.
            self._warn_once("update_state_after_alloc", error)

    def build_connector_meta(self, scheduler_output: Any) -> StrataConnectorMetadata:
        if self._scheduler is None:
            return StrataConnectorMetadata()
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
        finished = sorted(str(r) for r in (_get(scheduler_output, "finished_req_ids", None) or ()))
        try:
            native = self._scheduler.build_connector_meta(requests, finished)
        except Exception as error:
            self._warn_once("build_connector_meta", error)
            native = _sc.ConnectorMetadata()
        return StrataConnectorMetadata(native)

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

    def request_finished(self, request: Any,
                         block_ids: list[int]) -> tuple[bool, Optional[dict[str, Any]]]:
        if self._scheduler is None:
            return False, None
        try:
            keep = self._scheduler.request_finished(str(request.request_id),
                                                    _flat_block_ids(block_ids))
        except Exception as error:
            self._warn_once("request_finished", error)
            keep = False
        return bool(keep), None

    def take_events(self) -> Iterable[Any]:
        return ()

    @classmethod
    def get_required_kvcache_layout(cls, vllm_config: Any) -> Optional[str]:
        return None


def make_vllm_connector_class(base: type) -> type:
    """StrataConnector mixed with vLLM's KVConnectorBase_V1 (passed in, so this module never
    imports vLLM). The mixin's __init__ runs; the base's is skipped on purpose (it only stores
    the same configuration and logs an 'experimental API' warning)."""
    return type("StrataVllmConnector", (StrataConnector, base), {})
