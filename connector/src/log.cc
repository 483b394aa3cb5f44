#include "connector/src/log.h"

#include <memory>

#include "spdlog/sinks/stdout_color_sinks.h"

namespace strata::connector {

spdlog::logger& Log() {
  static spdlog::logger* const logger = new spdlog::logger(
      "strata-connector", std::make_shared<spdlog::sinks::stderr_color_sink_mt>());
  return *logger;
}

}  // namespace strata::connector
