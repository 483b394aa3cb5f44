#include "storage/io/io_engine.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <vector>

#include "core/scoped_fd.h"
#include "gtest/gtest.h"
#include "storage/io/aligned_buffer.h"
#include "storage/io/testing/fault_injecting_io_engine.h"
#include "storage/io/testing/io_test_util.h"
#include "storage/io/uring_io_engine.h"

namespace strata::storage {
namespace {

using testing::EngineOfKind;
using testing::RoundTrip;
using testing::ScratchDir;

class IoEngineTest : public ::testing::TestWithParam<IoEngineKind> {
 protected:
  void SetUp() override {
    ASSERT_FALSE(dir_.path().empty());
    auto engine = EngineOfKind(GetParam());
    if (!engine.ok()) GTEST_SKIP() << "io_uring unavailable here: " << engine.status();
    engine_ = std::move(engine).value();
    fd_ = ScopedFd(::open((dir_.path() + "/file").c_str(), O_RDWR | O_CREAT | O_DIRECT, 0644));
    ASSERT_TRUE(fd_.valid()) << std::strerror(errno);
  }

  // Fills `buffer` with a pattern of `seed`.
  static void Fill(AlignedBuffer& buffer, uint8_t seed) {
    for (uint64_t i = 0; i < buffer.size(); ++i) {
      buffer.data()[i] = static_cast<std::byte>((i * 131 + seed) & 0xff);
    }
  }

  ScratchDir dir_;
  std::unique_ptr<IoEngine> engine_;
  ScopedFd fd_;
};

TEST_P(IoEngineTest, WritesAndReadsBackMoreRequestsThanTheQueueDepth) {
  EXPECT_EQ(engine_->name(), testing::KindName(GetParam()));
  constexpr uint64_t kRequests = 80;
  constexpr uint32_t kBytes = 64 << 10;
  AlignedBuffer source(uint64_t{kRequests} * kBytes);
  Fill(source, 7);
  std::vector<IoRequest> writes;
  for (uint64_t i = 0; i < kRequests; ++i) {
    writes.push_back({.op = IoOp::kWrite,
                      .fd = fd_.get(),
                      .offset = i * kBytes,
                      .data = source.data() + i * kBytes,
                      .size_bytes = kBytes});
  }
  auto written = RunToCompletion(*engine_, writes);
  ASSERT_TRUE(written.ok()) << written.status();
  for (int64_t result : *written) EXPECT_EQ(result, kBytes);
  ASSERT_TRUE(engine_->Fdatasync(fd_.get()).ok());

  AlignedBuffer target(source.size());
  std::vector<IoRequest> reads = writes;
  for (uint64_t i = 0; i < kRequests; ++i) {
    reads[i].op = IoOp::kRead;
    reads[i].data = target.data() + i * kBytes;
  }
  std::vector<size_t> order;
  auto read = RunToCompletion(*engine_, reads, [&](size_t i, int64_t result) {
    EXPECT_EQ(result, kBytes);
    order.push_back(i);
  });
  ASSERT_TRUE(read.ok()) << read.status();
  ASSERT_EQ(order.size(), kRequests);
  for (size_t i = 0; i < kRequests; ++i) EXPECT_EQ(order[i], i);
  for (int64_t result : *read) EXPECT_EQ(result, kBytes);
  EXPECT_EQ(std::memcmp(source.data(), target.data(), source.size()), 0);
  EXPECT_EQ(engine_->in_flight(), 0u);
}

TEST_P(IoEngineTest, SubmitAndWaitTrackInFlightRequests) {
  AlignedBuffer buffer(kIoAlignment * 4);
  std::vector<IoRequest> writes;
  for (uint64_t i = 0; i < 4; ++i) {
    writes.push_back({.op = IoOp::kWrite,
                      .fd = fd_.get(),
                      .offset = i * kIoAlignment,
                      .data = buffer.data() + i * kIoAlignment,
                      .size_bytes = static_cast<uint32_t>(kIoAlignment),
                      .tag = 100 + i});
  }
  ASSERT_TRUE(engine_->Submit(writes).ok());
  EXPECT_EQ(engine_->in_flight(), 4u);
  std::vector<IoCompletion> out(8);
  size_t seen = 0;
  uint64_t tag_sum = 0;
  while (seen < 4) {
    auto n = engine_->Wait(1, out);
    ASSERT_TRUE(n.ok());
    for (size_t i = 0; i < *n; ++i) {
      EXPECT_EQ(out[i].result, static_cast<int64_t>(kIoAlignment));
      tag_sum += out[i].tag;
    }
    seen += *n;
  }
  EXPECT_EQ(tag_sum, 100u + 101 + 102 + 103);
  EXPECT_EQ(engine_->in_flight(), 0u);
}

TEST_P(IoEngineTest, RejectsMoreRequestsThanTheFreeQueueDepth) {
  AlignedBuffer buffer(kIoAlignment);
  std::vector<IoRequest> reads(engine_->queue_depth() + 1,
                               IoRequest{.op = IoOp::kRead,
                                         .fd = fd_.get(),
                                         .data = buffer.data(),
                                         .size_bytes = static_cast<uint32_t>(kIoAlignment)});
  EXPECT_EQ(engine_->Submit(reads).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(engine_->in_flight(), 0u);
}

TEST_P(IoEngineTest, ReportsEndOfFileAndBadFdsPerRequest) {
  AlignedBuffer buffer(2 * kIoAlignment);
  const IoRequest requests[] = {
      // Past the end of the (empty) file: a short transfer of 0 bytes.
      {.op = IoOp::kRead,
       .fd = fd_.get(),
       .offset = 1 << 20,
       .data = buffer.data(),
       .size_bytes = static_cast<uint32_t>(kIoAlignment)},
      {.op = IoOp::kRead,
       .fd = 987654,
       .data = buffer.data(),
       .size_bytes = static_cast<uint32_t>(kIoAlignment)},
  };
  auto results = RunToCompletion(*engine_, requests);
  ASSERT_TRUE(results.ok()) << results.status();
  EXPECT_EQ((*results)[0], 0);
  EXPECT_EQ((*results)[1], -EBADF);
  EXPECT_FALSE(engine_->Fdatasync(987654).ok());
}

TEST_P(IoEngineTest, FaultInjectionErrorsShortTransfersAndFlippedBytes) {
  auto plan = std::make_shared<FaultPlan>();
  FaultInjectingIoEngine faulty(std::move(engine_), plan);
  AlignedBuffer source(4 * kIoAlignment);
  Fill(source, 3);
  const IoRequest write{.op = IoOp::kWrite,
                        .fd = fd_.get(),
                        .data = source.data(),
                        .size_bytes = static_cast<uint32_t>(source.size())};

  plan->FailNext(IoOp::kWrite, 1, ENOSPC);
  EXPECT_EQ(RunToCompletion(faulty, {&write, 1}).value()[0], -ENOSPC);
  plan->ShortNext(IoOp::kWrite, 1);
  EXPECT_EQ(RunToCompletion(faulty, {&write, 1}).value()[0], 2 * kIoAlignment);
  EXPECT_EQ(RunToCompletion(faulty, {&write, 1}).value()[0], 4 * kIoAlignment);

  AlignedBuffer target(source.size());
  const IoRequest read{.op = IoOp::kRead,
                       .fd = fd_.get(),
                       .data = target.data(),
                       .size_bytes = static_cast<uint32_t>(target.size())};
  plan->FailNext(IoOp::kRead, 1, EIO);
  EXPECT_EQ(RunToCompletion(faulty, {&read, 1}).value()[0], -EIO);
  plan->FlipNextReads(1);
  EXPECT_EQ(RunToCompletion(faulty, {&read, 1}).value()[0], 4 * kIoAlignment);
  EXPECT_EQ(target.data()[0], ~source.data()[0]);
  EXPECT_EQ(std::memcmp(source.data() + 1, target.data() + 1, source.size() - 1), 0);
  EXPECT_EQ(RunToCompletion(faulty, {&read, 1}).value()[0], 4 * kIoAlignment);
  EXPECT_EQ(std::memcmp(source.data(), target.data(), source.size()), 0);

  plan->FailNextSyncs(1, EIO);
  EXPECT_EQ(faulty.Fdatasync(fd_.get()).code(), absl::StatusCode::kDataLoss);
  EXPECT_TRUE(faulty.Fdatasync(fd_.get()).ok());
  EXPECT_EQ(plan->injected(), 5);
}

// Fixed buffers the engine holds now: 0 for the sync engine.
size_t RegisteredBufferCount(const IoEngine& engine) {
  const auto* uring = dynamic_cast<const UringIoEngine*>(&engine);
  return uring == nullptr ? 0 : uring->registered().iovecs().size();
}

// Requests the engine submitted with a fixed buffer: 0 for the sync engine.
uint64_t FixedRequests(const IoEngine& engine) {
  const auto* uring = dynamic_cast<const UringIoEngine*>(&engine);
  return uring == nullptr ? 0 : uring->fixed_requests();
}

TEST_P(IoEngineTest, TransfersInsideAndAcrossTheEndOfARegisteredRegion) {
  constexpr uint32_t kRequestBytes = 64 << 10;
  AlignedBuffer source(1 << 20);
  AlignedBuffer target(source.size());
  Fill(source, 11);
  // The first half of each buffer is registered: requests in it are fixed, the one across its
  // end and those past it are not.
  const std::span<std::byte> regions[] = {source.span().first(source.size() / 2 + 4096),
                                          target.span().first(target.size() / 2 + 4096)};
  ASSERT_TRUE(engine_->RegisterMemory(regions).ok());
  EXPECT_EQ(RegisteredBufferCount(*engine_), GetParam() == IoEngineKind::kIoUring ? 2u : 0u);
  RoundTrip(*engine_, fd_.get(), source.span(), target.span(), kRequestBytes);
  // 8 writes and 8 reads lie wholly inside; the 9th of each straddles the end.
  EXPECT_EQ(FixedRequests(*engine_), GetParam() == IoEngineKind::kIoUring ? 16u : 0u);
}

TEST_P(IoEngineTest, ReRegistrationReplacesTheRegions) {
  constexpr uint32_t kRequestBytes = 32 << 10;
  AlignedBuffer first(256 << 10);
  AlignedBuffer second(first.size());
  AlignedBuffer target(first.size());
  Fill(first, 21);
  Fill(second, 22);
  const std::span<std::byte> first_regions[] = {first.span(), target.span()};
  ASSERT_TRUE(engine_->RegisterMemory(first_regions).ok());
  RoundTrip(*engine_, fd_.get(), first.span(), target.span(), kRequestBytes);
  // `first` is no longer registered: its requests take the plain path.
  const std::span<std::byte> second_regions[] = {second.span(), target.span()};
  const uint64_t requests = 2 * first.size() / kRequestBytes;  // per round trip
  const uint64_t fixed = GetParam() == IoEngineKind::kIoUring ? requests : 0;
  EXPECT_EQ(FixedRequests(*engine_), fixed);
  ASSERT_TRUE(engine_->RegisterMemory(second_regions).ok());
  RoundTrip(*engine_, fd_.get(), second.span(), target.span(), kRequestBytes);
  EXPECT_EQ(FixedRequests(*engine_), 2 * fixed);
  RoundTrip(*engine_, fd_.get(), first.span(), target.span(), kRequestBytes);
  EXPECT_EQ(FixedRequests(*engine_), 2 * fixed + fixed / 2);  // the reads into `target`
  ASSERT_TRUE(engine_->RegisterMemory({}).ok());
  EXPECT_EQ(RegisteredBufferCount(*engine_), 0u);
  RoundTrip(*engine_, fd_.get(), second.span(), target.span(), kRequestBytes);
  EXPECT_EQ(FixedRequests(*engine_), 2 * fixed + fixed / 2);
}

TEST_P(IoEngineTest, TransfersThroughManyRegisteredRegions) {
  constexpr int kRegions = 64;
  constexpr uint32_t kRegionBytes = 16 << 10;
  std::vector<AlignedBuffer> sources;
  std::vector<AlignedBuffer> targets;
  std::vector<std::span<std::byte>> regions;
  for (int i = 0; i < kRegions; ++i) {
    Fill(sources.emplace_back(kRegionBytes), static_cast<uint8_t>(i));
    targets.emplace_back(kRegionBytes);
  }
  for (int i = 0; i < kRegions; ++i) {
    regions.push_back(sources[i].span());
    regions.push_back(targets[i].span());
  }
  ASSERT_TRUE(engine_->RegisterMemory(regions).ok());
  EXPECT_EQ(RegisteredBufferCount(*engine_),
            GetParam() == IoEngineKind::kIoUring ? 2u * kRegions : 0u);
  for (int i = 0; i < kRegions; ++i) {
    RoundTrip(*engine_, fd_.get(), sources[i].span(), targets[i].span(), kRegionBytes / 2);
  }
}

TEST_P(IoEngineTest, FaultInjectingEngineForwardsRegistration) {
  FaultInjectingIoEngine faulty(std::move(engine_), std::make_shared<FaultPlan>());
  AlignedBuffer source(128 << 10);
  AlignedBuffer target(source.size());
  Fill(source, 5);
  const std::span<std::byte> regions[] = {source.span(), target.span()};
  ASSERT_TRUE(faulty.RegisterMemory(regions).ok());
  RoundTrip(faulty, fd_.get(), source.span(), target.span(), 16 << 10);
}

INSTANTIATE_TEST_SUITE_P(Engines, IoEngineTest,
                         ::testing::Values(IoEngineKind::kIoUring, IoEngineKind::kSync),
                         [](const auto& info) {
                           return std::string(info.param == IoEngineKind::kIoUring ? "IoUring"
                                                                                   : "Sync");
                         });

TEST(MakeIoEngineTest, ChoosesAnEngineAndValidatesOptions) {
  auto engine = MakeIoEngine({});
  ASSERT_TRUE(engine.ok()) << engine.status();
  EXPECT_GE((*engine)->queue_depth(), 16u);
  EXPECT_EQ(MakeIoEngine({.queue_depth = 8}).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ParseIoEngineKind("io_uring").value(), IoEngineKind::kIoUring);
  EXPECT_EQ(ParseIoEngineKind("sync").value(), IoEngineKind::kSync);
  EXPECT_EQ(ParseIoEngineKind("auto").value(), IoEngineKind::kAuto);
  EXPECT_FALSE(ParseIoEngineKind("aio").ok());
}

}  // namespace
}  // namespace strata::storage
