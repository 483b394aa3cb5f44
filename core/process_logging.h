// Process-wide logging set-up for Strata's binaries, stratad and strata-controller (spdlog,
// stderr, one line per event).
#pragma once

#include <string_view>

namespace strata {

// Names the logger after `program`, sets the global level ("trace" .. "critical", "off"; anything
// else means "info") and the line pattern: time, level, thread, message.
void SetUpLogging(std::string_view program, std::string_view level);

}  // namespace strata
