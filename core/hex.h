// Lower-case hex encoding of byte strings, and its strict inverse.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace strata {

std::string HexEncode(std::span<const uint8_t> bytes);
// nullopt unless `hex` has an even length and only [0-9a-fA-F].
std::optional<std::vector<uint8_t>> HexDecode(std::string_view hex);

}  // namespace strata
