"""SGLang's HiCache storage types when SGLang is importable, and stand-ins of the same shape when
not.

``STORAGE_BASES`` is ``(HiCacheStorage,)`` with SGLang installed (its storage backend factory
requires a subclass) and ``()`` without it: the backend then works by duck typing, e.g. in tests
or in a process that only drives the binding. ``PoolTransferResult``, ``PoolName`` and
``PoolHitPolicy`` are SGLang's, or stand-ins with the fields and values the backend uses.

The shapes were taken from SGLang's ``python/sglang/srt/mem_cache/hicache_storage.py`` at commit
001067fffe33427bee0ed2f007fb7551a1d76b44 (the table in ``tests/test_sglang_backend.py`` lists
the methods and their parameters).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum

SGLANG_COMMIT = "001067fffe33427bee0ed2f007fb7551a1d76b44"

try:
    from sglang.srt.mem_cache.hicache_storage import HiCacheStorage

    STORAGE_BASES: tuple[type, ...] = (HiCacheStorage,)
except ImportError:
    STORAGE_BASES = ()

try:
    from sglang.srt.mem_cache.hicache_storage import (
        PoolHitPolicy,
        PoolName,
        PoolTransferResult,
    )
except ImportError:

    class PoolName(str, Enum):  # type: ignore[no-redef]
        """Stand-in for SGLang's PoolName: only the KV pool's name is needed here."""

        KV = "kv"

        def __str__(self) -> str:
            return self.value

    class PoolHitPolicy(str, Enum):  # type: ignore[no-redef]
        ALL_PAGES = "all_pages"
        TRAILING_PAGES = "trailing_pages"

    @dataclass
    class PoolTransferResult:  # type: ignore[no-redef]
        """Stand-in for SGLang's PoolTransferResult: the usable KV prefix in pages, and the
        pages found per extra pool."""

        kv_hit_pages: int
        extra_pool_hit_pages: dict = field(default_factory=dict)

        @classmethod
        def empty(cls) -> "PoolTransferResult":
            return cls(0, {})


SGLANG_AVAILABLE = bool(STORAGE_BASES)
