"""Strata's vLLM integration: a KVConnectorBase_V1-shaped connector over the strata_connector
binding."""

from strata_vllm.connector import (
    SCHEDULER,
    WORKER,
    StrataConnector,
    StrataConnectorMetadata,
    make_vllm_connector_class,
    options_from_vllm_config,
)

__all__ = [
    "SCHEDULER",
    "WORKER",
    "StrataConnector",
    "StrataConnectorMetadata",
    "make_vllm_connector_class",
    "options_from_vllm_config",
]
