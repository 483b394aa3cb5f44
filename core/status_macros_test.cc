#include "core/status_macros.h"

#include <cerrno>

#include "core/status_util.h"
#include "gtest/gtest.h"

namespace strata {
namespace {

absl::StatusOr<int> Half(int v) {
  if (v % 2 != 0) return absl::InvalidArgumentError("odd");
  return v / 2;
}

absl::StatusOr<int> Quarter(int v) {
  STRATA_ASSIGN_OR_RETURN(int half, Half(v));
  STRATA_ASSIGN_OR_RETURN(int quarter, Half(half));
  return quarter;
}

absl::Status CheckEven(int v) {
  STRATA_RETURN_IF_ERROR(Half(v).status());
  return absl::OkStatus();
}

TEST(StatusMacros, AssignOrReturnUnwrapsAndPropagates) {
  EXPECT_EQ(*Quarter(8), 2);
  EXPECT_EQ(Quarter(6).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Quarter(3).status().message(), "odd");
}

TEST(StatusMacros, ReturnIfErrorPropagates) {
  EXPECT_TRUE(CheckEven(4).ok());
  EXPECT_EQ(CheckEven(5).code(), absl::StatusCode::kInvalidArgument);
}

TEST(StatusUtil, ErrnoMapsToCanonicalCodes) {
  EXPECT_EQ(ErrnoToStatus(ENOSPC, "write").code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(ErrnoToStatus(EIO, "read").code(), absl::StatusCode::kDataLoss);
  EXPECT_EQ(ErrnoToStatus(EINVAL, "x").code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ErrnoToStatus(ECONNRESET, "x").code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(ErrnoToStatus(ENOSPC, "disk tier: write segment 3").message(),
            "disk tier: write segment 3: No space left on device");
}

TEST(StatusUtil, AnnotateKeepsCodeAndOk) {
  EXPECT_TRUE(Annotate(absl::OkStatus(), "ctx").ok());
  const absl::Status s = Annotate(absl::DataLossError("checksum"), "host tier");
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss);
  EXPECT_EQ(s.message(), "host tier: checksum");
}

}  // namespace
}  // namespace strata
