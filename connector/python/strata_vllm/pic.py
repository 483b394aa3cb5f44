"""Position-independent chunk reuse for a request, asked for through its kv_transfer_params.

A request whose prompt holds reusable passages (RAG documents, tool outputs, few-shot examples)
names them, so that their KV is shared wherever they appear (ALGORITHMS.md section 3; MEPIC,
EPIC, CacheBlend)::

    kv_transfer_params = {"strata_pic": {
        "chunks": [[begin, end], ...],     # token spans of the prompt that are chunks, or
        "separator": [token, ...],         # LMCache's blend mode: each chunk ends at a separator
        "recompute": "mepic",              # or "legolink", "legolink0", "cacheblend"
        "legolink_tokens": 16,             # legolink: the first k real tokens of each shared chunk
        "check_layer": 1,                  # cacheblend: the layer its selection is made at
        "blend_ratio": 0.15,               # cacheblend: the share of chunk tokens recomputed
        "tenant": "",                      # chunks are shared within a tenant only
    }}

Only "chunks" or "separator" is required (one of them, not both). ``pic_params`` reads and
checks them; ``PicPlanner`` plans a request over ``strata_connector.PicConnector``: it pads the
prompt, finds the chunks other requests computed in the daemon's device pool, and says which
pages to read in place, which to compute and publish, which another engine is computing now
("pending": refresh a step later to share them), and which tokens to recompute; its
"block_table" names, per block of the padded prompt, a pool page read in place or one of the
request's own blocks (filled first from a page where it stands for part of a shared chunk), with
its "position". A chunk the daemon thinned (Compress with drop_sink_recent) is shared as its kept
blocks only ("pool_page_positions"): its dropped blocks have no entry, and attention reads each
kept page at its own position.

Executing a plan needs attention that reads the daemon's pool pages at the positions the plan
gives them (the fused-RoPE path of kernels/paged_attention.h). Stock vLLM's attention reads only
its own blocks, so ``StrataConnector`` does not plan requests itself: it serves a request that
asks for chunks by prefix caching, and says so once. A model runner that has such attention
builds a ``PicPlanner`` in its worker process and calls it per request.

The fallback rule: a request whose params are malformed, or whose chunks the daemon cannot
take, is never failed: ``PicPlanner.begin`` returns None for the first (logged once per
request) and a plan with private chunks for the second; the request is then computed as a
plain prompt.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any, Optional

import strata_connector as _sc

logger = logging.getLogger("strata_vllm")

PIC_PARAMS_KEY = "strata_pic"
RECOMPUTE_POLICIES = ("mepic", "legolink", "legolink0", "cacheblend")


class MalformedPicParams(ValueError):
    """A request's strata_pic params that name no usable chunks or options."""


@dataclass(frozen=True)
class PicParams:
    """A request's position-independent reuse, as its kv_transfer_params ask for it."""

    chunks: tuple[tuple[int, int], ...] = ()  # spans of the prompt; empty with a separator
    separator: tuple[int, ...] = ()
    recompute: str = "mepic"
    legolink_tokens: int = 16
    check_layer: int = 1
    blend_ratio: float = 0.15
    tenant: str = ""


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _non_negative_ints(name: str, values: Any) -> tuple[int, ...]:
    if not isinstance(values, (list, tuple)) or not all(_is_int(v) and v >= 0 for v in values):
        raise MalformedPicParams(f"{name} is {values!r}, not a list of token ids")
    return tuple(values)


def pic_params(kv_transfer_params: Any) -> Optional[PicParams]:
    """The request's PicParams; None when its kv_transfer_params do not ask for chunks. Raises
    MalformedPicParams naming the first thing wrong (the spans themselves, whether they overlap
    or fit the prompt, are checked by PicConnector.begin)."""
    if not isinstance(kv_transfer_params, dict) or PIC_PARAMS_KEY not in kv_transfer_params:
        return None
    params = kv_transfer_params[PIC_PARAMS_KEY]
    if not isinstance(params, dict):
        raise MalformedPicParams(f"{PIC_PARAMS_KEY} is {type(params).__name__}, not a dict")
    known = {"chunks", "separator", "recompute", "legolink_tokens", "check_layer", "blend_ratio",
             "tenant"}
    unknown = sorted(set(params) - known)
    if unknown:
        raise MalformedPicParams(f"unknown {PIC_PARAMS_KEY} keys {unknown}")
    if ("chunks" in params) == ("separator" in params):
        raise MalformedPicParams("give exactly one of 'chunks' and 'separator'")
    chunks: tuple[tuple[int, int], ...] = ()
    separator: tuple[int, ...] = ()
    if "chunks" in params:
        spans = params["chunks"]
        if not isinstance(spans, (list, tuple)):
            raise MalformedPicParams(f"chunks is {spans!r}, not a list of [begin, end] spans")
        for span in spans:
            if (not isinstance(span, (list, tuple)) or len(span) != 2
                    or not all(_is_int(v) and v >= 0 for v in span)):
                raise MalformedPicParams(f"chunk span {span!r} is not [begin, end]")
        chunks = tuple((int(b), int(e)) for b, e in spans)
    else:
        separator = _non_negative_ints("separator", params["separator"])
        if not separator:
            raise MalformedPicParams("separator is empty")
    recompute = params.get("recompute", "mepic")
    if recompute not in RECOMPUTE_POLICIES:
        raise MalformedPicParams(f"recompute is {recompute!r}, not one of {RECOMPUTE_POLICIES}")
    for name in ("legolink_tokens", "check_layer"):
        if name in params and not (_is_int(params[name]) and params[name] >= 0):
            raise MalformedPicParams(f"{name} is {params[name]!r}, not a count")
    ratio = params.get("blend_ratio", 0.15)
    if isinstance(ratio, bool) or not isinstance(ratio, (int, float)) or not 0 <= ratio <= 1:
        raise MalformedPicParams(f"blend_ratio is {ratio!r}, not a number in [0, 1]")
    tenant = params.get("tenant", "")
    if not isinstance(tenant, str):
        raise MalformedPicParams(f"tenant is {tenant!r}, not a string")
    return PicParams(chunks=chunks, separator=separator, recompute=recompute,
                     legolink_tokens=params.get("legolink_tokens", 16),
                     check_layer=params.get("check_layer", 1), blend_ratio=float(ratio),
                     tenant=tenant)


class PicPlanner:
    """Plans requests' position-independent chunks in the daemon's device pool, for a model
    runner whose attention reads the pool's pages (see the module's docstring). Thread-safe as
    strata_connector.PicConnector is; one per worker process."""

    def __init__(self, options: "_sc.ConnectorOptions", pad_token: int = 0,
                 connector: Any = None):
        # `connector`: a PicConnector made elsewhere (tests); else one over `options`.
        self._connector = connector if connector is not None else _sc.PicConnector(
            options, pad_token)

    @property
    def connector(self) -> Any:
        return self._connector

    def begin(self, request_id: str, prompt_tokens: list[int],
              kv_transfer_params: Any) -> Optional[dict]:
        """The request's plan (strata_connector.PicConnector.begin's dict); None when it asks
        for no chunks or asks wrongly (logged): compute it as a plain prompt then."""
        try:
            params = pic_params(kv_transfer_params)
            if params is None:
                return None
            if params.separator:
                chunks = _sc.PicConnector.markers_from_separator(prompt_tokens,
                                                                 list(params.separator))
            else:
                chunks = list(params.chunks)
            return self._connector.begin(
                request_id, prompt_tokens, chunks, recompute=params.recompute,
                legolink_tokens=params.legolink_tokens, check_layer=params.check_layer,
                blend_ratio=params.blend_ratio, tenant=params.tenant)
        except ValueError as error:  # MalformedPicParams, or the binding's invalid argument
            logger.warning("strata: request %s: position-independent chunks refused (%s); it "
                           "falls back to prefix caching", request_id, error)
            return None

    def publish(self, request_id: str) -> dict:
        """The engine wrote the plan's "write" chunks: commit them; returns the plan again."""
        return self._connector.publish(request_id)

    def refresh(self, request_id: str) -> dict:
        """Places the plan's "pending" chunks again (another engine was writing them) once that
        engine has had a step: published ones are "shared"; returns the plan again."""
        return self._connector.refresh(request_id)

    def verify(self, request_id: str) -> bool:
        """False when the pages the request read may have changed (recompute what used them)."""
        return self._connector.verify(request_id)

    def report_importance(self, request_id: str, chunk: int, importance: list[float]) -> None:
        """The attention each token of the plan's chunk `chunk` received (H2O's importance, one
        value per token of its padded span; reports are summed): an operator's Compress with
        drop_h2o keeps the chunk's heaviest blocks. ValueError for a report of another length or
        a negative value."""
        self._connector.report_importance(request_id, chunk, importance)

    def end(self, request_id: str) -> None:
        self._connector.end(request_id)
