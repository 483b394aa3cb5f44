#include "core/status_util.h"

#include <cerrno>
#include <cstring>
#include <string>

#include "fmt/format.h"

namespace strata {
namespace {

absl::StatusCode CodeForErrno(int error_number) {
  switch (error_number) {
    case ENOSPC:
    case ENOMEM:
    case EMFILE:
    case ENFILE:
    case EDQUOT:
      return absl::StatusCode::kResourceExhausted;
    case EINVAL:
    case EBADF:
    case ENAMETOOLONG:
      return absl::StatusCode::kInvalidArgument;
    case ENOENT:
      return absl::StatusCode::kNotFound;
    case EEXIST:
      return absl::StatusCode::kAlreadyExists;
    case EACCES:
    case EPERM:
      return absl::StatusCode::kPermissionDenied;
    case EAGAIN:
    case EINTR:
    case ECONNREFUSED:
    case ECONNRESET:
    case EPIPE:
    case ETIMEDOUT:
      return absl::StatusCode::kUnavailable;
    case ENOSYS:
    case EOPNOTSUPP:
      return absl::StatusCode::kUnimplemented;
    case EIO:
      return absl::StatusCode::kDataLoss;
    default:
      return absl::StatusCode::kInternal;
  }
}

}  // namespace

absl::Status ErrnoToStatus(int error_number, std::string_view context) {
  return absl::Status(CodeForErrno(error_number),
                      fmt::format("{}: {}", context, std::strerror(error_number)));
}

absl::Status Annotate(const absl::Status& status, std::string_view context) {
  if (status.ok()) return status;
  return absl::Status(status.code(), fmt::format("{}: {}", context,
                                                 std::string_view(status.message().data(),
                                                                  status.message().size())));
}

}  // namespace strata
