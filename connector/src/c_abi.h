// The C ABI's shared half (connector_c.h's conventions): the calling thread's last error, the
// guard that turns exceptions and statuses into strata_status, and the options conversion. Used by
// every file that implements part of the ABI (connector_c.cc, pic_connector_c.cc). Thread-safe:
// the last error is per thread.
#pragma once

#include <exception>
#include <new>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "fmt/format.h"
#include "strata/connector.h"
#include "strata/connector_c.h"

namespace strata::connector::c_abi {

// Sets the calling thread's last error; returns `code`.
strata_status Fail(strata_status code, std::string message);
// STRATA_OK, or the status's code with its message as the last error.
strata_status FromStatus(const absl::Status& status);
// The calling thread's last error (strata_last_error).
const std::string& LastError();
void ClearLastError();

// Runs `body`, turning exceptions into statuses.
template <class F>
strata_status Guard(F&& body) {
  try {
    ClearLastError();
    return body();
  } catch (const std::bad_alloc&) {
    return Fail(STRATA_RESOURCE_EXHAUSTED, "out of memory");
  } catch (const std::exception& e) {
    return Fail(STRATA_INTERNAL, fmt::format("unexpected exception: {}", e.what()));
  } catch (...) {
    return Fail(STRATA_INTERNAL, "unexpected exception");
  }
}

inline std::string_view OrEmpty(const char* s) { return s == nullptr ? std::string_view() : s; }

// The C options as ConnectorOptions, validated; kInvalidArgument naming the bad field.
absl::StatusOr<ConnectorOptions> ToOptions(const strata_connector_options* in);

}  // namespace strata::connector::c_abi

#define STRATA_C_REQUIRE(cond, what)                                                       \
  do {                                                                                     \
    if (!(cond)) return ::strata::connector::c_abi::Fail(STRATA_INVALID_ARGUMENT, (what)); \
  } while (false)
