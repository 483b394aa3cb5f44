// The connector's logger. A library inside an engine must not write to the engine's stdout or
// depend on the engine's spdlog set-up, so the connector logs through its own unregistered
// logger "strata-connector" that writes to stderr. Thread-safe.
#pragma once

#include "spdlog/logger.h"

namespace strata::connector {

spdlog::logger& Log();

}  // namespace strata::connector
