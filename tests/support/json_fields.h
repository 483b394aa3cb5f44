// Fields of the one-line JSON objects that test and benchmark processes print (sim_engine's
// request lines): enough to read a value by name without a JSON library. Values must not
// contain escaped quotes.
#pragma once

#include <cstdint>
#include <string>

namespace strata::test_support {

// The integer value of "name" in a JSON line; -1 when it has none.
int64_t JsonInt(const std::string& line, const std::string& name);
// The string value of "name" in a JSON line; "" when it has none.
std::string JsonString(const std::string& line, const std::string& name);
// The boolean value of "name"; false when it has none.
bool JsonBool(const std::string& line, const std::string& name);

}  // namespace strata::test_support
