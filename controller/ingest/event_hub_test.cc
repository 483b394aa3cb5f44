#include "controller/ingest/event_hub.h"

#include <atomic>
#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "gtest/gtest.h"

namespace strata::controller {
namespace {

class CountingWatcher : public EventHub::Watcher {
 public:
  void Wake() override { ++wakes; }
  std::atomic<int> wakes{0};
};

v1::InstanceEvents Batch(const std::string& instance, v1::InstanceEvents::Kind kind) {
  v1::InstanceEvents batch;
  batch.set_instance_id(instance);
  batch.set_kind(kind);
  return batch;
}

TEST(EventHubTest, EachWatcherTakesWhatWasPublishedAfterItCame) {
  EventHub hub;
  CountingWatcher early, late;
  hub.Add(&early);
  hub.Publish(Batch("a", v1::InstanceEvents::RESYNCED));
  hub.Add(&late);
  hub.Publish(Batch("b", v1::InstanceEvents::LEFT));
  EXPECT_EQ(early.wakes, 2);
  EXPECT_EQ(late.wakes, 1);

  v1::ClusterWatchResponse taken;
  ASSERT_TRUE(hub.Take(&early, 1, taken).ok());
  ASSERT_EQ(taken.batches_size(), 1);
  EXPECT_EQ(taken.batches(0).instance_id(), "a");
  ASSERT_TRUE(hub.Take(&early, 10, taken).ok());
  ASSERT_EQ(taken.batches_size(), 2) << "appended, oldest first";
  EXPECT_EQ(taken.batches(1).kind(), v1::InstanceEvents::LEFT);
  v1::ClusterWatchResponse for_late;
  ASSERT_TRUE(hub.Take(&late, 10, for_late).ok());
  ASSERT_EQ(for_late.batches_size(), 1);
  EXPECT_EQ(for_late.batches(0).instance_id(), "b");

  hub.Remove(&early);
  hub.Publish(Batch("c", v1::InstanceEvents::CLEARED));
  EXPECT_EQ(early.wakes, 2) << "never woken after Remove";
  EXPECT_EQ(hub.Take(&early, 1, taken).code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(hub.watchers(), 1u);
}

TEST(EventHubTest, AWatcherThatFallsBehindIsCutOff) {
  EventHub hub(/*max_queued=*/3);
  CountingWatcher slow, quick;
  hub.Add(&slow);
  hub.Add(&quick);
  for (int i = 0; i < 5; ++i) {
    hub.Publish(Batch("a", v1::InstanceEvents::EVENTS));
    v1::ClusterWatchResponse drained;
    ASSERT_TRUE(hub.Take(&quick, 10, drained).ok());
    EXPECT_EQ(drained.batches_size(), 1);
  }
  v1::ClusterWatchResponse taken;
  const absl::Status cut = hub.Take(&slow, 10, taken);
  EXPECT_EQ(cut.code(), absl::StatusCode::kResourceExhausted) << cut;
  EXPECT_EQ(taken.batches_size(), 0);
  EXPECT_EQ(slow.wakes, 4) << "woken by the batch that cut it off, not after";
}

// Publishers on several threads while a watcher drains and another comes and goes: every batch
// published while a watcher is registered reaches it exactly once (TSan checks the locking).
TEST(EventHubTest, ConcurrentPublishersAndWatchers) {
  EventHub hub(/*max_queued=*/100'000);
  CountingWatcher steady, churning;
  hub.Add(&steady);
  std::vector<std::thread> publishers;
  for (int t = 0; t < 3; ++t) {
    publishers.emplace_back([&hub, t] {
      for (int i = 0; i < 1'000; ++i)
        hub.Publish(Batch(std::to_string(t), v1::InstanceEvents::EVENTS));
    });
  }
  size_t taken = 0;
  std::thread drainer([&] {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    while (taken < 3'000 && std::chrono::steady_clock::now() < deadline) {
      v1::ClusterWatchResponse response;
      ASSERT_TRUE(hub.Take(&steady, 64, response).ok());
      taken += static_cast<size_t>(response.batches_size());
    }
  });
  for (int i = 0; i < 100; ++i) {
    hub.Add(&churning);
    hub.Remove(&churning);
  }
  for (std::thread& publisher : publishers) publisher.join();
  drainer.join();
  EXPECT_EQ(taken, 3'000u);
}

}  // namespace
}  // namespace strata::controller
