"""vLLM's per-layer paged KV caches, as views the native connector reads.

The native connector takes one of three forms per layer (connector/include/strata/connector.h,
``LayerKvCache``): K and V stacked as ``[2, num_blocks, block_size, kv_heads, head_dim]`` (any
strides, head_dim contiguous), separate K and V tensors, or an MLA latent
``[num_blocks, block_size, 1, head_dim]``. Older vLLM hands over those forms directly.

vLLM from 0.32 on (``vllm/v1/kv_cache_interface.py``, ``create_kv_cache_views``) hands each
layer over as one 4D view ``[B, H, N, C]`` (blocks, head slots, block slots, content) whose
strides follow the group's ``KVCacheLayout``; C packs K and V, and where each lies within a
block is the attention backend's own reading of the page:

- ``token``: K and V side by side per (token, head): C = [K | V] (FlashAttention, FlexAttention,
  Triton: ``kv_cache.split(head_size, dim=-1)``);
- ``block halves``: per (block, head), a K half then a V half (vLLM's CPU backend views
  ``[B, H, N, 2 * head_size]`` as ``[B, H, 2N, head_size]`` and chunks dim 2). Inside each half
  the kernel keeps its own encoding (csrc/cpu: K column-major for its vector ISA, tiles
  prepacked for AMX), so a token's KV is not a row there: such blocks are opaque pages
  (``page_encoding``), copied only whole (the native connector's ``whole_blocks_only``), and
  keyed apart from every other encoding.

Both become the stacked form by a strided view of the same memory (no copy), which copies whole
blocks byte for byte. A backend whose reading is not known here is refused
(``UnknownKvPacking``): a wrong guess would save and serve K for V. An MLA layer (one plane, one
head slot) is its latent rows whatever the backend.
"""

from __future__ import annotations

from typing import Any, Optional

# Attention backends (their get_name()) and how each reads a packed [B, H, N, C] page.
TOKEN_PACKED = "token"
BLOCK_HALVES = "block_halves"
PACKING_BY_BACKEND = {
    "FLASH_ATTN": TOKEN_PACKED,
    "FLEX_ATTENTION": TOKEN_PACKED,
    "TRITON_ATTN": TOKEN_PACKED,
    "CPU_ATTN": BLOCK_HALVES,
}


class UnknownKvPacking(ValueError):
    """A packed layer cache whose backend's K/V placement the connector does not know."""


def page_encoding(dtype: Any, block_size: int, head_size: int, cache_dtype: Any,
                  use_mla: bool) -> Optional[str]:
    """The encoding of vLLM's attention blocks when they are opaque pages ("cpu_attn.amx",
    "cpu_attn.vec", ...: vLLM's CPU backend and the instruction set its kernel chose for these
    shapes on this machine), None when a token's KV is a row of its block (GPU backends, MLA,
    or no vLLM)."""
    if use_mla:
        return None
    try:
        from vllm.platforms import current_platform
        if not current_platform.is_cpu():
            return None
        from vllm.v1.attention.backends.cpu_attn import _get_attn_isa
    except ImportError:
        return None
    return f"cpu_attn.{_get_attn_isa(dtype, block_size, head_size, cache_dtype)}"


def backend_name(vllm_config: Any, layer_name: str) -> Optional[str]:
    """The attention backend's name of a layer (vLLM's static forward context), or None when
    the config does not say (older vLLM, stand-ins)."""
    layer = _attention_layer(vllm_config, layer_name)
    get_backend = getattr(layer, "get_attn_backend", None)
    if get_backend is None:
        return None
    try:
        return str(get_backend().get_name())
    except Exception:  # a layer without a backend (e.g. not attention)
        return None


def _attention_layer(vllm_config: Any, layer_name: str) -> Any:
    context = getattr(getattr(vllm_config, "compilation_config", None),
                      "static_forward_context", None) or {}
    return context.get(layer_name)


def layer_encoding(vllm_config: Any, layer_name: str) -> Optional[str]:
    """The page encoding a layer's CPU attention kernel uses (the ``isa`` vLLM's CPU backend
    set on it), None for any other layer."""
    isa = getattr(_attention_layer(vllm_config, layer_name), "isa", None)
    return None if isa is None else f"cpu_attn.{isa}"


def layer_views(cache: Any, use_mla: bool, head_size: int,
                backend: Optional[str]) -> tuple[Any, Optional[Any]]:
    """(kv, v) of one layer for the native connector: ``cache`` as vLLM passed it (a tensor or
    a (K, V) pair); ``head_size`` the model's (the group's) K head size. Raises ValueError
    (UnknownKvPacking) for a packed page it cannot read."""
    if isinstance(cache, (list, tuple)):
        key, value = cache
        return key, value
    if len(cache.shape) != 4:
        return cache, None  # the stacked or MLA forms of older vLLM
    blocks, heads, slots, content = (int(s) for s in cache.shape)
    s_block, s_head, s_slot, s_content = (int(s) for s in cache.stride())
    if use_mla:
        if heads != 1:
            raise ValueError(f"MLA cache of shape {list(cache.shape)}: want one head slot")
        return cache.transpose(1, 2), None  # [B, N, 1, C]
    if content != 2 * head_size or s_content != 1:
        raise ValueError(f"packed cache of shape {list(cache.shape)} and strides "
                         f"{list(cache.stride())}: want a contiguous content of 2 x {head_size}")
    packing = PACKING_BY_BACKEND.get(backend or "")
    if packing is None:
        raise UnknownKvPacking(
            f"attention backend {backend or '(unknown)'} packs K and V in a [B, H, N, C] page "
            f"in a way the strata connector does not know (known: "
            f"{', '.join(sorted(PACKING_BY_BACKEND))})")
    if packing == TOKEN_PACKED:
        plane_stride, slot_stride = head_size, s_slot
    else:
        if s_slot != content:
            raise ValueError(f"{backend} cache with strides {list(cache.stride())}: a (block, "
                             "head) page must be contiguous")
        plane_stride, slot_stride = slots * head_size, head_size
    stacked = cache.as_strided((2, blocks, slots, heads, head_size),
                               (plane_stride, s_block, slot_stride, s_head, 1),
                               cache.storage_offset())
    return stacked, None
