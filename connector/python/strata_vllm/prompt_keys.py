"""The token ids a vLLM request's chunk keys are made of.

Chunk keys chain over token ids (core/key_hasher). A multimodal prompt's placeholder tokens are
the same for every image (or audio clip, or video) of a kind, so two requests with the same text
and different images would share keys and be served each other's KV. As vLLM's own block hashes
do, the key of a position inside a multimodal input comes from that input's hash instead:
``key_tokens`` replaces the token ids of each input's placeholder range (``mm_features``:
``identifier``, vLLM's hash of the input, and ``mm_position``: offset, length) by 32-bit values
drawn from that hash and the position within the input. The same image at the same place gives
the same keys; a different one, different keys from its first position on.

A prompt the keys cannot describe is not cached (``None``): prompt embeddings (the token ids do
not say what was computed), or a multimodal input without a hash or a placeholder range inside
the prompt.

Duck-typed on vLLM's ``Request`` and ``NewRequestData`` (``prompt_token_ids``, ``mm_features``,
``prompt_embeds``).
"""

from __future__ import annotations

import hashlib
from typing import Any, Optional

_MASK64 = (1 << 64) - 1


def _input_token(seed: int, index: int) -> int:
    """A 32-bit value for position `index` of an input whose hash gave `seed` (splitmix64)."""
    x = (seed + (index + 1) * 0x9E3779B97F4A7C15) & _MASK64
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & _MASK64
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & _MASK64
    return (x ^ (x >> 31)) & 0xFFFFFFFF


def key_tokens(request: Any) -> Optional[list[int]]:
    """The prompt's token ids with each multimodal input's positions drawn from its hash; None
    when the prompt cannot be keyed (see the module docstring)."""
    if getattr(request, "prompt_embeds", None) is not None:
        return None
    tokens = list(getattr(request, "prompt_token_ids", None) or [])
    for feature in getattr(request, "mm_features", None) or []:
        identifier = getattr(feature, "identifier", None)
        position = getattr(feature, "mm_position", None)
        offset = getattr(position, "offset", None)
        length = getattr(position, "length", None)
        if not identifier or not isinstance(offset, int) or not isinstance(length, int):
            return None
        if offset < 0 or length <= 0 or offset + length > len(tokens):
            return None
        seed = int.from_bytes(hashlib.blake2b(str(identifier).encode(), digest_size=8).digest(),
                              "little")
        for index in range(length):
            tokens[offset + index] = _input_token(seed, index)
    return tokens
