// Process-wide logging set-up for stratad (spdlog, stderr, one line per event).
#pragma once

#include <string_view>

namespace strata::daemon {

// Sets the global level ("trace" .. "critical", "off"; anything else means "info") and the
// line pattern: time, level, thread, message.
void SetUpLogging(std::string_view level);

}  // namespace strata::daemon
