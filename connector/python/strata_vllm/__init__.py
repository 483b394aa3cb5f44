"""Strata's vLLM integration: the KV connector vLLM loads by name (``kv_connector``
"StrataConnector", ``kv_connector_module_path`` "strata_vllm") over the strata_connector
binding."""

from strata_vllm.connector import (
    SCHEDULER,
    WORKER,
    StrataConnector,
    StrataConnectorMetadata,
    StrataKVConnectorStats,
    options_from_vllm_config,
)
from strata_vllm.vllm_types import VLLM_AVAILABLE

__all__ = [
    "SCHEDULER",
    "VLLM_AVAILABLE",
    "WORKER",
    "StrataConnector",
    "StrataConnectorMetadata",
    "StrataKVConnectorStats",
    "options_from_vllm_config",
]
