// Fuzzes the daemon's TOML config loader (daemon/config.h: ApplyToml over the embedded default,
// then ValidateConfig): a config file is operator input, but a typo or a truncated file must end
// in an error naming the key, never in a crash or an exception escaping the loader.
// A document that applies must print back (ConfigToToml) to a document that applies to the same
// config again (the printed form is a fixed point).
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "daemon/config.h"
#include "tests/fuzz/fuzz_check.h"

namespace sd = strata::daemon;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  const sd::ConfigEnvironment env{.physical_memory_bytes = 16ull << 30, .runtime_dir = ""};
  const sd::DaemonConfig base = sd::DefaultConfig(env);
  auto config = sd::ApplyToml(text, base);
  if (!config.ok()) {
    FUZZ_CHECK(config.status().code() == absl::StatusCode::kInvalidArgument);
    return 0;
  }
  (void)sd::ValidateConfig(*config);
  const std::string printed = sd::ConfigToToml(*config);
  auto reread = sd::ApplyToml(printed, base);
  FUZZ_CHECK(reread.ok());
  FUZZ_CHECK(sd::ConfigToToml(*reread) == printed);
  return 0;
}
