#include "storage/io/registered_buffers.h"

#include <fcntl.h>
#include <linux/capability.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <vector>

#include "core/scoped_fd.h"
#include "gtest/gtest.h"
#include "storage/io/aligned_buffer.h"
#include "storage/io/testing/io_test_util.h"
#include "storage/io/uring_io_engine.h"

namespace strata::storage {
namespace {

constexpr uint64_t kPage = 4096;

TEST(RegisteredBuffersTest, SplitsRegionsIntoBuffersInAddressOrder) {
  std::vector<std::byte> memory(64 * kPage);
  const std::span<std::byte> all(memory);
  // Given out of order, with an empty one.
  const std::span<std::byte> regions[] = {
      all.subspan(20 * kPage, 2 * kPage), {}, all.subspan(0, 10 * kPage)};
  auto buffers = RegisteredBuffers::Build(regions, 3 * kPage);
  ASSERT_TRUE(buffers.ok()) << buffers.status();
  const std::span<const iovec> iovecs = buffers->iovecs();
  ASSERT_EQ(iovecs.size(), 5u);
  const uint64_t expected_pages[][2] = {{0, 3}, {3, 3}, {6, 3}, {9, 1}, {20, 2}};
  for (size_t i = 0; i < iovecs.size(); ++i) {
    EXPECT_EQ(iovecs[i].iov_base, memory.data() + expected_pages[i][0] * kPage) << i;
    EXPECT_EQ(iovecs[i].iov_len, expected_pages[i][1] * kPage) << i;
  }
}

TEST(RegisteredBuffersTest, FindsTheBufferThatHoldsAWholeRequest) {
  std::vector<std::byte> memory(64 * kPage);
  std::byte* base = memory.data();
  const std::span<std::byte> regions[] = {std::span(base + 8 * kPage, 8 * kPage),
                                          std::span(base + 32 * kPage, 4 * kPage)};
  auto buffers = RegisteredBuffers::Build(regions, 4 * kPage);
  ASSERT_TRUE(buffers.ok()) << buffers.status();
  ASSERT_EQ(buffers->iovecs().size(), 3u);  // [8, 12) [12, 16) [32, 36) in pages
  EXPECT_EQ(buffers->Find(base + 8 * kPage, 4 * kPage), 0);
  EXPECT_EQ(buffers->Find(base + 13 * kPage, kPage), 1);
  EXPECT_EQ(buffers->Find(base + 35 * kPage, kPage), 2);
  EXPECT_EQ(buffers->Find(base + 32 * kPage + 100, 3 * kPage), 2);
  EXPECT_EQ(buffers->Find(base, kPage), std::nullopt);                   // before all
  EXPECT_EQ(buffers->Find(base + 7 * kPage, 2 * kPage), std::nullopt);   // into the first
  EXPECT_EQ(buffers->Find(base + 11 * kPage, 2 * kPage), std::nullopt);  // across a split
  EXPECT_EQ(buffers->Find(base + 15 * kPage, 2 * kPage), std::nullopt);  // out of a region
  EXPECT_EQ(buffers->Find(base + 20 * kPage, kPage), std::nullopt);      // between regions
  EXPECT_EQ(buffers->Find(base + 36 * kPage, kPage), std::nullopt);      // past all
  EXPECT_EQ(buffers->Find(base + 33 * kPage, 4 * kPage), std::nullopt);  // past the end
  EXPECT_EQ(RegisteredBuffers().Find(base, kPage), std::nullopt);
}

TEST(RegisteredBuffersTest, RejectsOverlapsTooManyBuffersAndAZeroMaximum) {
  std::vector<std::byte> memory(16 * kPage);
  const std::span<std::byte> all(memory);
  const std::span<std::byte> overlapping[] = {all.subspan(0, 4 * kPage),
                                              all.subspan(3 * kPage, 4 * kPage)};
  EXPECT_EQ(RegisteredBuffers::Build(overlapping, kPage).status().code(),
            absl::StatusCode::kInvalidArgument);
  const std::span<std::byte> whole[] = {all};
  EXPECT_EQ(RegisteredBuffers::Build(whole, 0).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(
      RegisteredBuffers::Build(whole, memory.size() / (kMaxRegisteredBuffers + 1)).status().code(),
      absl::StatusCode::kInvalidArgument);
}

class UringRegistrationTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_FALSE(dir_.path().empty());
    fd_ = ScopedFd(::open((dir_.path() + "/file").c_str(), O_RDWR | O_CREAT | O_DIRECT, 0644));
    ASSERT_TRUE(fd_.valid()) << std::strerror(errno);
  }

  static void Fill(AlignedBuffer& buffer, uint8_t seed) {
    for (uint64_t i = 0; i < buffer.size(); ++i) {
      buffer.data()[i] = static_cast<std::byte>((i * 37 + seed) & 0xff);
    }
  }

  testing::ScratchDir dir_;
  ScopedFd fd_;
};

TEST_F(UringRegistrationTest, SplitsRegionsAtTheEnginesMaximumAndServesRequestsAcrossSplits) {
  auto engine = UringIoEngine::Create(32, 64 << 10);
  if (!engine.ok()) GTEST_SKIP() << "io_uring unavailable here: " << engine.status();
  AlignedBuffer source(384 << 10);
  AlignedBuffer target(source.size());
  Fill(source, 9);
  const std::span<std::byte> regions[] = {source.span(), target.span()};
  ASSERT_TRUE((*engine)->RegisterMemory(regions).ok());
  EXPECT_EQ((*engine)->registered().iovecs().size(), 12u);
  // 48 KiB requests at 0, 48, 96, ... KiB: of every four, the first and last lie inside one
  // 64 KiB buffer, the middle two straddle two.
  testing::RoundTrip(**engine, fd_.get(), source.span(), target.span(), 48 << 10);
  EXPECT_EQ((*engine)->fixed_requests(), 2u * 4);
  EXPECT_EQ(UringIoEngine::Create(32, 0).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST_F(UringRegistrationTest, RefusesToRegisterWithRequestsInFlightOrOverlappingRegions) {
  auto engine = UringIoEngine::Create(32);
  if (!engine.ok()) GTEST_SKIP() << "io_uring unavailable here: " << engine.status();
  AlignedBuffer buffer(64 << 10);
  Fill(buffer, 1);
  const IoRequest write{.op = IoOp::kWrite,
                        .fd = fd_.get(),
                        .data = buffer.data(),
                        .size_bytes = static_cast<uint32_t>(buffer.size())};
  ASSERT_TRUE((*engine)->Submit({&write, 1}).ok());
  const std::span<std::byte> regions[] = {buffer.span()};
  EXPECT_EQ((*engine)->RegisterMemory(regions).code(), absl::StatusCode::kFailedPrecondition);
  std::vector<IoCompletion> out(1);
  ASSERT_EQ((*engine)->Wait(1, out).value(), 1u);
  const std::span<std::byte> overlapping[] = {buffer.span(), buffer.span().subspan(4096)};
  EXPECT_EQ((*engine)->RegisterMemory(overlapping).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE((*engine)->registered().empty());
  AlignedBuffer target(buffer.size());
  testing::RoundTrip(**engine, fd_.get(), buffer.span(), target.span(), 16 << 10);
}

// Sets CAP_IPC_LOCK in or out of this thread's effective capabilities; false when capset fails.
bool SetIpcLockEffective(bool on) {
  __user_cap_header_struct header{.version = _LINUX_CAPABILITY_VERSION_3, .pid = 0};
  __user_cap_data_struct data[2] = {};
  if (::syscall(SYS_capget, &header, data) != 0) return false;
  const uint32_t bit = 1u << CAP_IPC_LOCK;
  if (on && (data[0].permitted & bit) == 0) return false;
  data[0].effective = on ? data[0].effective | bit : data[0].effective & ~bit;
  return ::syscall(SYS_capset, &header, data) == 0;
}

TEST_F(UringRegistrationTest, ARegistrationTheKernelRefusesLeavesTheEngineWorking) {
  // A ring made without CAP_IPC_LOCK accounts registered pages against RLIMIT_MEMLOCK: lower
  // the capability while the ring is made, then the limit below the region's size.
  const bool had_ipc_lock = SetIpcLockEffective(true);
  if (had_ipc_lock && !SetIpcLockEffective(false)) {
    GTEST_SKIP() << "cannot drop CAP_IPC_LOCK";
  }
  auto engine = UringIoEngine::Create(32);
  if (had_ipc_lock) {
    ASSERT_TRUE(SetIpcLockEffective(true));
  }
  if (!engine.ok()) GTEST_SKIP() << "io_uring unavailable here: " << engine.status();
  rlimit saved{};
  ASSERT_EQ(::getrlimit(RLIMIT_MEMLOCK, &saved), 0);
  rlimit lowered = saved;
  lowered.rlim_cur = 64 << 10;
  ASSERT_EQ(::setrlimit(RLIMIT_MEMLOCK, &lowered), 0) << std::strerror(errno);
  AlignedBuffer source(4 << 20);
  AlignedBuffer target(source.size());
  Fill(source, 2);
  const std::span<std::byte> regions[] = {source.span(), target.span()};
  const absl::Status refused = (*engine)->RegisterMemory(regions);
  ASSERT_EQ(::setrlimit(RLIMIT_MEMLOCK, &saved), 0) << std::strerror(errno);
  if (refused.ok()) {
    GTEST_SKIP() << "the kernel registered 8 MiB over a 64 KiB RLIMIT_MEMLOCK";
  }
  EXPECT_EQ(refused.code(), absl::StatusCode::kResourceExhausted) << refused;
  EXPECT_TRUE((*engine)->registered().empty());
  testing::RoundTrip(**engine, fd_.get(), source.span(), target.span(), 256 << 10);
  EXPECT_EQ((*engine)->fixed_requests(), 0u);
}

}  // namespace
}  // namespace strata::storage
