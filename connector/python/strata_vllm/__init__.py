"""Strata's vLLM integration: the KV connector vLLM loads by name (``kv_connector``
"StrataConnector", ``kv_connector_module_path`` "strata_vllm") over the strata_connector
binding, and the planner of position-independent chunks (strata_vllm.pic) for model runners
whose attention reads the daemon's device pool."""

from strata_vllm.connector import (
    SCHEDULER,
    WORKER,
    StrataConnector,
    StrataConnectorMetadata,
    StrataKVConnectorStats,
    options_from_vllm_config,
)
from strata_vllm.pic import MalformedPicParams, PicParams, PicPlanner, pic_params
from strata_vllm.vllm_types import VLLM_AVAILABLE

__all__ = [
    "MalformedPicParams",
    "PicParams",
    "PicPlanner",
    "SCHEDULER",
    "VLLM_AVAILABLE",
    "WORKER",
    "StrataConnector",
    "StrataConnectorMetadata",
    "StrataKVConnectorStats",
    "options_from_vllm_config",
    "pic_params",
]
