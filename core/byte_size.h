// Byte sizes as people write them in configuration and on command lines.
#pragma once

#include <cstdint>
#include <string_view>

#include "absl/status/statusor.h"

namespace strata {

// "4096", "512MiB", "8GiB", "1.5GiB", "2 GB" -> bytes: binary units KiB, MiB, GiB, TiB, decimal
// units KB, MB, GB, or B; a non-negative number (a fraction allowed) before the unit, spaces
// between them allowed. kInvalidArgument for anything else, or for more than ~1.8e19 bytes.
absl::StatusOr<uint64_t> ParseByteSize(std::string_view text);

}  // namespace strata
