#include "storage/io/io_engine_pool.h"

#include <atomic>
#include <memory>
#include <vector>

#include "gtest/gtest.h"
#include "storage/io/sync_io_engine.h"

namespace strata::storage {
namespace {

// What the pool's engines were asked to register, shared by the test and its engines.
struct Registrations {
  std::atomic<int> engines_made{0};
  std::atomic<int> calls{0};
  std::atomic<bool> refuse{false};
};

// A sync engine that records the regions it was last asked to register, and may refuse them.
class RecordingEngine final : public IoEngine {
 public:
  explicit RecordingEngine(std::shared_ptr<Registrations> registrations)
      : inner_(16), registrations_(std::move(registrations)) {}
  std::string_view name() const override { return inner_.name(); }
  size_t queue_depth() const override { return inner_.queue_depth(); }
  size_t in_flight() const override { return inner_.in_flight(); }
  absl::Status Submit(std::span<const IoRequest> requests) override {
    return inner_.Submit(requests);
  }
  absl::StatusOr<size_t> Wait(size_t min_completions, std::span<IoCompletion> out) override {
    return inner_.Wait(min_completions, out);
  }
  absl::Status Fdatasync(int fd) override { return inner_.Fdatasync(fd); }
  absl::Status RegisterMemory(std::span<const std::span<std::byte>> regions) override {
    registrations_->calls.fetch_add(1);
    regions_.clear();
    if (registrations_->refuse.load()) {
      return absl::ResourceExhaustedError("io_uring_register_buffers: Cannot allocate memory");
    }
    regions_.assign(regions.begin(), regions.end());
    return absl::OkStatus();
  }

  const std::vector<std::span<std::byte>>& regions() const { return regions_; }

 private:
  SyncIoEngine inner_;
  std::shared_ptr<Registrations> registrations_;
  std::vector<std::span<std::byte>> regions_;
};

class IoEnginePoolTest : public ::testing::Test {
 protected:
  IoEnginePoolTest()
      : pool_([registrations = registrations_]() -> absl::StatusOr<std::unique_ptr<IoEngine>> {
          registrations->engines_made.fetch_add(1);
          return std::make_unique<RecordingEngine>(registrations);
        }) {}

  static const std::vector<std::span<std::byte>>& RegionsOf(const IoEnginePool::Lease& lease) {
    return dynamic_cast<const RecordingEngine&>(*lease).regions();
  }

  std::shared_ptr<Registrations> registrations_ = std::make_shared<Registrations>();
  IoEnginePool pool_;
};

TEST_F(IoEnginePoolTest, RegistersIdleLentAndNewEnginesWithTheSameRegions) {
  std::vector<std::byte> first(8192);
  std::vector<std::byte> second(8192);
  const std::span<std::byte> first_regions[] = {first};
  const std::span<std::byte> second_regions[] = {second};

  // An empty pool makes an engine to register (and report the kernel's answer).
  ASSERT_TRUE(pool_.RegisterMemory(first_regions).ok());
  EXPECT_EQ(registrations_->engines_made.load(), 1);
  EXPECT_EQ(registrations_->calls.load(), 1);
  {
    auto lent = pool_.Acquire();
    ASSERT_TRUE(lent.ok()) << lent.status();
    EXPECT_EQ(registrations_->calls.load(), 1);  // already registered
    ASSERT_EQ(RegionsOf(*lent).size(), 1u);
    EXPECT_EQ(RegionsOf(*lent)[0].data(), first.data());

    // A new registration while the engine is lent: an engine is made and registered now, the
    // lent one when it is next lent.
    ASSERT_TRUE(pool_.RegisterMemory(second_regions).ok());
    EXPECT_EQ(registrations_->engines_made.load(), 2);
    EXPECT_EQ(RegionsOf(*lent)[0].data(), first.data());
    auto made_later = pool_.Acquire();
    ASSERT_TRUE(made_later.ok());
    EXPECT_EQ(RegionsOf(*made_later)[0].data(), second.data());
  }
  for (int i = 0; i < 2; ++i) {
    auto a = pool_.Acquire();
    auto b = pool_.Acquire();
    ASSERT_TRUE(a.ok() && b.ok());
    EXPECT_EQ(RegionsOf(*a)[0].data(), second.data());
    EXPECT_EQ(RegionsOf(*b)[0].data(), second.data());
    // A third engine is made for the third concurrent lease, registered before it is lent.
    auto c = pool_.Acquire();
    ASSERT_TRUE(c.ok());
    EXPECT_EQ(RegionsOf(*c)[0].data(), second.data());
  }
  EXPECT_EQ(registrations_->engines_made.load(), 3);

  ASSERT_TRUE(pool_.RegisterMemory({}).ok());
  auto unregistered = pool_.Acquire();
  ASSERT_TRUE(unregistered.ok());
  EXPECT_TRUE(RegionsOf(*unregistered).empty());
}

TEST_F(IoEnginePoolTest, ARefusedRegistrationIsReportedAndLeavesEnginesServing) {
  std::vector<std::byte> memory(8192);
  const std::span<std::byte> regions[] = {memory};
  registrations_->refuse = true;
  EXPECT_EQ(pool_.RegisterMemory(regions).code(), absl::StatusCode::kResourceExhausted);
  const int calls = registrations_->calls.load();
  {
    auto a = pool_.Acquire();
    auto b = pool_.Acquire();  // made now: its refusal is logged, the lease still given
    ASSERT_TRUE(a.ok() && b.ok());
    EXPECT_TRUE(RegionsOf(*a).empty());
    EXPECT_TRUE(RegionsOf(*b).empty());
    EXPECT_EQ((*b)->name(), "sync");
  }
  // A refused engine is not asked again until the next registration.
  auto again = pool_.Acquire();
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(registrations_->calls.load(), calls + 1);
}

TEST_F(IoEnginePoolTest, UnregisteringWhatWasNeverRegisteredTouchesNoEngine) {
  ASSERT_TRUE(pool_.RegisterMemory({}).ok());
  EXPECT_EQ(registrations_->engines_made.load(), 0);
  EXPECT_EQ(registrations_->calls.load(), 0);
}

TEST_F(IoEnginePoolTest, AFailureToMakeAnEngineIsReturned) {
  IoEnginePool failing([]() -> absl::StatusOr<std::unique_ptr<IoEngine>> {
    return absl::UnavailableError("io_uring_queue_init: Operation not permitted");
  });
  EXPECT_EQ(failing.Acquire().status().code(), absl::StatusCode::kUnavailable);
  std::vector<std::byte> memory(4096);
  const std::span<std::byte> regions[] = {memory};
  EXPECT_EQ(failing.RegisterMemory(regions).code(), absl::StatusCode::kUnavailable);
}

}  // namespace
}  // namespace strata::storage
