"""vLLM's KV-connector types when vLLM is importable, and stand-ins of the same shape when not.

The connector subclasses what this module resolves: ``CONNECTOR_BASES`` is
``(KVConnectorBase_V1, SupportsHMA)`` with vLLM installed (``SupportsHMA`` where the installed
vLLM has it) and ``()`` without it (the adapter then works by
duck typing, e.g. in tests or a process that only drives the binding); likewise
``METADATA_BASES`` for ``KVConnectorMetadata``. ``KVConnectorStats`` is vLLM's class, or a
dataclass with its fields and methods (``data``, ``reset``, ``aggregate``, ``reduce``,
``is_empty``); ``KVConnectorTransferResults`` likewise, and ``hit_source`` names a
``CacheHitSource``.

The shapes are vLLM 0.32.0's (``vllm/distributed/kv_transfer/kv_connector/v1/base.py`` and
``metrics.py``), the version the engine tests install and run (tests/engines).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

try:
    from vllm.distributed.kv_transfer.kv_connector.v1.base import (
        KVConnectorBase_V1,
        KVConnectorMetadata,
    )

    CONNECTOR_BASES: tuple[type, ...] = (KVConnectorBase_V1,)
    METADATA_BASES: tuple[type, ...] = (KVConnectorMetadata,)
    try:  # hybrid models: vLLM keeps its hybrid allocator on only for connectors with it
        from vllm.distributed.kv_transfer.kv_connector.v1.base import SupportsHMA

        CONNECTOR_BASES += (SupportsHMA,)
    except ImportError:
        pass
except ImportError:
    CONNECTOR_BASES = ()
    METADATA_BASES = ()

try:
    from vllm.distributed.kv_transfer.kv_connector.v1.metrics import KVConnectorStats
except ImportError:

    @dataclass
    class KVConnectorStats:  # type: ignore[no-redef]
        """Stand-in for vLLM's KVConnectorStats: a container of telemetry sent from the
        workers to the logger process."""

        data: dict[str, Any] = field(default_factory=dict)

        def reset(self) -> None:
            raise NotImplementedError

        def aggregate(self, other: "KVConnectorStats") -> "KVConnectorStats":
            raise NotImplementedError

        def reduce(self) -> dict[str, int | float]:
            raise NotImplementedError

        def is_empty(self) -> bool:
            raise NotImplementedError


try:
    from vllm.distributed.kv_transfer.kv_connector.v1.base import KVConnectorTransferResults
except ImportError:

    @dataclass
    class KVConnectorTransferResults:  # type: ignore[no-redef]
        """Stand-in for vLLM's KVConnectorTransferResults (vLLM 0.32 on): one worker's
        asynchronous transfers that ended, failed receives included in finished_recving."""

        finished_sending: set[str] = field(default_factory=set)
        finished_recving: set[str] = field(default_factory=set)
        failed_recving: set[str] = field(default_factory=set)


try:
    from vllm.v1.metrics.cache_hit_source import CacheHitSource

    def hit_source(name: str) -> Any:
        """vLLM's CacheHitSource member of that value ("host", "disk", "p2p")."""
        return CacheHitSource(name)
except ImportError:

    def hit_source(name: str) -> Any:
        return name


VLLM_AVAILABLE = bool(CONNECTOR_BASES)
