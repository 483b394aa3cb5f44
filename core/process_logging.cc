#include "core/process_logging.h"

#include <string>

#include "spdlog/sinks/stdout_color_sinks.h"
#include "spdlog/spdlog.h"

namespace strata {

void SetUpLogging(std::string_view program, std::string_view level) {
  spdlog::set_default_logger(spdlog::stderr_color_mt(std::string(program)));
  spdlog::set_level(spdlog::level::from_str(std::string(level)));
  spdlog::set_pattern("%Y-%m-%dT%H:%M:%S.%e %^%l%$ [%t] %v");
}

}  // namespace strata
