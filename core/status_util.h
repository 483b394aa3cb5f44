// Small helpers for building and annotating absl::Status values.
#pragma once

#include <string_view>

#include "absl/status/status.h"

namespace strata {

// A Status for a failed system call: the errno maps to the closest canonical code (ENOSPC and
// ENOMEM -> kResourceExhausted, EIO -> kDataLoss, EAGAIN and connection errors -> kUnavailable,
// EINVAL -> kInvalidArgument, ...) and the message is "<context>: <strerror(errno)>".
absl::Status ErrnoToStatus(int error_number, std::string_view context);

// Returns `status` with "<context>: " prefixed to its message, keeping its code. OK stays OK.
absl::Status Annotate(const absl::Status& status, std::string_view context);

}  // namespace strata
