// Early-return helpers for absl::Status and absl::StatusOr<T>.
//
//   STRATA_RETURN_IF_ERROR(DoThing());            // returns the Status if it is not OK
//   STRATA_ASSIGN_OR_RETURN(auto fd, OpenFd());   // unwraps a StatusOr or returns its Status
#pragma once

#include "absl/status/status.h"
#include "absl/status/statusor.h"

#define STRATA_STATUS_CONCAT_INNER_(a, b) a##b
#define STRATA_STATUS_CONCAT_(a, b) STRATA_STATUS_CONCAT_INNER_(a, b)

#define STRATA_RETURN_IF_ERROR(expr)        \
  do {                                      \
    ::absl::Status strata_status_ = (expr); \
    if (!strata_status_.ok()) [[unlikely]]  \
      return strata_status_;                \
  } while (false)

#define STRATA_ASSIGN_OR_RETURN_IMPL_(statusor, lhs, expr) \
  auto statusor = (expr);                                  \
  if (!statusor.ok()) [[unlikely]]                         \
    return std::move(statusor).status();                   \
  lhs = std::move(statusor).value()

#define STRATA_ASSIGN_OR_RETURN(lhs, expr) \
  STRATA_ASSIGN_OR_RETURN_IMPL_(STRATA_STATUS_CONCAT_(strata_statusor_, __LINE__), lhs, expr)
