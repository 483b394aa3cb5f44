"""vLLM's KV-cache groups, as the connector serves them: one Strata layout and key space each.

A hybrid model (full attention plus sliding-window layers, MLA plus an indexer cache, ...) gives
vLLM several KV-cache groups (``kv_cache_config.kv_cache_groups``): each has its own layers, KV
shape and block table. The connector runs one native connector per group, whose layout comes
from the group's spec, and whose ``model_id`` names the group (its index, kind and a digest of
its layer names), so that the groups' chunks never share keys even when their shapes agree, and
two engines share a group's chunks only when it holds the same layers.

vLLM's null block (id 0) stands, in a sliding-window group, for a block that fell out of the
window: every group of a hybrid model sets ``null_block_id`` = 0, so that no chunk spanning one
is saved and no load writes one (full-attention groups never hold it).

Saves are planned per step, from the block ids vLLM handed the connector; vLLM frees a
sliding-window group's blocks as they leave the window without saying so. A chunk saved in the
step that completes it reads blocks of at most ``chunk_tokens`` positions back, which are still
in a window at least that long: a shorter window (e.g. gpt-oss's 128 with 256-token chunks) is
refused; set ``chunk_tokens`` no longer than the window.

A group whose state is not KV per token (Mamba's) cannot be cached. Either way
``kv_cache_groups`` raises ``UnsupportedKvCacheGroup`` naming the group, and the connector then
serves nothing (it says so once).

Everything here is duck-typed on vLLM's ``KVCacheConfig`` / ``KVCacheGroupSpec`` / spec classes
(``vllm/v1/kv_cache_interface.py``): ``layer_names``, ``kv_cache_spec`` with ``block_size``,
``num_kv_heads``, ``head_size``, ``dtype``; MLA specs are recognised by their class name.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass
from typing import Any, Optional

# vLLM's null block: block 0 of the shared pool, never handed to a request as a real block.
VLLM_NULL_BLOCK_ID = 0


class UnsupportedKvCacheGroup(ValueError):
    """A KV-cache group the connector cannot cache (e.g. Mamba state)."""


@dataclass(frozen=True)
class KvGroup:
    """One KV-cache group: its layers (in vLLM's order) and the layout fields it overrides."""

    index: int
    kind: str  # the spec's class name, e.g. "FullAttentionSpec", "SlidingWindowSpec"
    layer_names: tuple[str, ...]
    block_size: int
    num_kv_heads: int
    head_size: int
    dtype: Any
    use_mla: bool

    def model_id(self, base: str) -> str:
        """The group's key space: the model's id, the group's index and kind, and a digest of
        its layer names."""
        digest = zlib.crc32("\0".join(self.layer_names).encode())
        return f"{base}#kv-group{self.index}:{self.kind}:{digest:08x}"


def kv_cache_groups(kv_cache_config: Any, chunk_tokens: int) -> Optional[list[KvGroup]]:
    """The groups of a hybrid model; None for a model with at most one group (or no config),
    which the connector serves from the model's config as it always did. Raises
    UnsupportedKvCacheGroup for a group that holds no per-token KV, or whose sliding window is
    shorter than a chunk."""
    groups = list(getattr(kv_cache_config, "kv_cache_groups", None) or ())
    if len(groups) <= 1:
        return None
    out = []
    for index, group in enumerate(groups):
        spec = getattr(group, "kv_cache_spec", None)
        kind = type(spec).__name__
        if "Mamba" in kind or not all(hasattr(spec, f) for f in ("num_kv_heads", "head_size")):
            raise UnsupportedKvCacheGroup(
                f"KV-cache group {index} ({kind}) holds no per-token KV; the strata connector "
                "caches attention groups only")
        window = getattr(spec, "sliding_window", None)
        if window is not None and int(window) < chunk_tokens:
            raise UnsupportedKvCacheGroup(
                f"KV-cache group {index} ({kind}) has a sliding window of {window} tokens, "
                f"shorter than a chunk ({chunk_tokens}): set chunk_tokens to at most {window}")
        out.append(KvGroup(
            index=index, kind=kind, layer_names=tuple(str(n) for n in group.layer_names),
            block_size=int(spec.block_size), num_kv_heads=int(spec.num_kv_heads),
            head_size=int(spec.head_size), dtype=getattr(spec, "dtype", None),
            use_mla="MLA" in kind))
    return out


def group_block_ids(block_ids: Any, num_groups: int) -> list[list[int]]:
    """vLLM's block ids of a request, per group: a KVCacheBlocks, a tuple of per-group lists,
    or (one group) a flat list. Raises ValueError when the number of groups differs."""
    if block_ids is None:
        return [[] for _ in range(num_groups)]
    if hasattr(block_ids, "get_block_ids"):  # KVCacheBlocks
        block_ids = block_ids.get_block_ids()
    block_ids = list(block_ids)
    if not block_ids or not isinstance(block_ids[0], (list, tuple)):
        block_ids = [block_ids]  # flat: one group
    if len(block_ids) != num_groups:
        raise ValueError(f"block ids for {len(block_ids)} KV-cache groups, the connector "
                         f"serves {num_groups}")
    return [[int(b) for b in ids] for ids in block_ids]
