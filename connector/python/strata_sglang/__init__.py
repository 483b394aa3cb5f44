"""SGLang HiCache L3 storage backend backed by the node's Strata daemon.

SGLang loads it as a dynamic storage backend (see README.md in this directory):

    --hicache-storage-backend dynamic --hicache-storage-backend-extra-config
    '{"backend_name": "strata", "module_path": "strata_sglang", "class_name": "StrataHiCacheStorage",
      "interface_v1": 1, "socket_path": "/path/to/engine.sock"}'

SGLang's pages live in a key space of their own in the daemon (keys are SGLang's page hash
strings, see strata/page_store.h), so SGLang and vLLM instances share one daemon's capacity but
never each other's chunks.
"""

from .backend import StrataHiCacheStorage, options_from_storage_config
from .sglang_types import SGLANG_AVAILABLE, SGLANG_COMMIT

__all__ = ["StrataHiCacheStorage", "options_from_storage_config", "SGLANG_AVAILABLE",
           "SGLANG_COMMIT"]
