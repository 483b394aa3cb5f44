#include "storage/tiered/background_worker.h"

#include <sys/resource.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <future>
#include <memory>
#include <thread>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "storage/tiered/task_thread.h"

namespace strata::storage {
namespace {

using ::testing::ElementsAre;

// A gate a task waits at until the test opens it.
class Gate {
 public:
  void Open() { opened_.set_value(); }
  void Wait() { future_.wait(); }

 private:
  std::promise<void> opened_;
  std::shared_future<void> future_ = opened_.get_future().share();
};

TEST(TaskThreadTest, UrgentTasksOvertakeNormalOnesAndFlushWaitsForBoth) {
  TaskThread thread("strata-test");
  Gate gate;
  std::vector<int> order;
  std::atomic<bool> started{false};
  ASSERT_TRUE(thread.Submit([&] {
    started = true;
    gate.Wait();
  }));
  // The thread holds the first task at the gate before the others come (else the urgent ones
  // would go first, rightly, and be done before the count below).
  for (int i = 0; i < 5000 && !started; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  ASSERT_TRUE(started);
  ASSERT_TRUE(thread.Submit([&] { order.push_back(1); }));
  ASSERT_TRUE(thread.Submit([&] { order.push_back(2); }, /*urgent=*/true));
  ASSERT_TRUE(thread.Submit([&] { order.push_back(3); }, /*urgent=*/true));
  EXPECT_EQ(thread.pending(), 4u);
  gate.Open();
  thread.Flush();
  EXPECT_THAT(order, ElementsAre(2, 3, 1));
  EXPECT_EQ(thread.pending(), 0u);
}

TEST(TaskThreadTest, FlushWaitsForAnOvertakenTask) {
  TaskThread thread("strata-test");
  Gate first, slow;
  std::atomic<bool> normal_ran{false};
  ASSERT_TRUE(thread.Submit([&] { first.Wait(); }));
  ASSERT_TRUE(thread.Submit([&] { normal_ran = true; }));
  std::future<void> flushed = std::async(std::launch::async, [&] { thread.Flush(); });
  // An urgent task submitted after the Flush runs first; the Flush must still wait for the
  // normal task it was given.
  ASSERT_TRUE(thread.Submit([&] { slow.Wait(); }, /*urgent=*/true));
  first.Open();
  EXPECT_EQ(flushed.wait_for(std::chrono::milliseconds(50)), std::future_status::timeout);
  EXPECT_FALSE(normal_ran);
  slow.Open();
  flushed.get();
  EXPECT_TRUE(normal_ran);
}

TEST(TaskThreadTest, StopRunsWhatIsQueuedAndRefusesTheRest) {
  TaskThread thread("strata-test");
  Gate gate;
  std::atomic<int> ran{0};
  ASSERT_TRUE(thread.Submit([&] { gate.Wait(); }));
  for (int i = 0; i < 5; ++i) ASSERT_TRUE(thread.Submit([&] { ++ran; }));
  std::thread stopper([&] { thread.Stop(); });
  gate.Open();
  stopper.join();
  EXPECT_EQ(ran, 5);
  // Refused: the task is destroyed unrun, with what it held.
  auto held = std::make_shared<int>(0);
  EXPECT_FALSE(thread.Submit([held] { ++*held; }));
  EXPECT_EQ(held.use_count(), 1);
  EXPECT_EQ(*held, 0);
  thread.Stop();  // idempotent
}

// Records each batch the worker processes; a gate holds the first one.
struct Recorder {
  absl::Mutex mu;
  std::vector<std::vector<int>> batches ABSL_GUARDED_BY(mu);
  std::vector<int> dropped ABSL_GUARDED_BY(mu);
  std::atomic<int> entered{0};  // process calls begun

  BackgroundWorker<int>::Process Process(Gate* gate = nullptr) {
    return [this, gate](std::span<int> batch) {
      ++entered;
      if (gate != nullptr) gate->Wait();
      absl::MutexLock lock(&mu);
      batches.emplace_back(batch.begin(), batch.end());
    };
  }
  // Waits (at most 5 s) until the thread has begun a process call.
  bool AwaitEntered() {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
    while (entered == 0 && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    return entered > 0;
  }
  BackgroundWorker<int>::Dropped Dropped() {
    return [this](std::span<int> items) {
      absl::MutexLock lock(&mu);
      dropped.insert(dropped.end(), items.begin(), items.end());
    };
  }
};

TEST(BackgroundWorkerTest, HandsOverBatchesOfAtMostMaxBatchInPushOrder) {
  Recorder recorder;
  Gate gate;
  BackgroundWorker<int> worker({.thread_name = "strata-test", .max_batch = 3},
                               recorder.Process(&gate));
  for (int i = 1; i <= 7; ++i) ASSERT_TRUE(worker.Push(int{i}));
  gate.Open();
  worker.Flush();
  EXPECT_EQ(worker.pushed(), 7u);
  EXPECT_EQ(worker.pending(), 0u);
  absl::MutexLock lock(&recorder.mu);
  std::vector<int> all;
  for (const std::vector<int>& batch : recorder.batches) {
    EXPECT_LE(batch.size(), 3u);
    all.insert(all.end(), batch.begin(), batch.end());
  }
  EXPECT_THAT(all, ElementsAre(1, 2, 3, 4, 5, 6, 7));
  // The first batch was taken alone (the gate held it), so the rest came in batches of 3.
  EXPECT_GE(recorder.batches.size(), 3u);
}

TEST(BackgroundWorkerTest, RefusesPastMaxQueuedAndLeavesTheItemToTheCaller) {
  std::atomic<int> entered{0};
  Gate gate;
  BackgroundWorker<std::unique_ptr<int>> worker({.thread_name = "strata-test", .max_queued = 2},
                                                [&](std::span<std::unique_ptr<int>>) {
                                                  ++entered;
                                                  gate.Wait();
                                                });
  ASSERT_TRUE(worker.Push(std::make_unique<int>(0)));
  for (int i = 0; i < 5000 && entered == 0; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  ASSERT_EQ(entered, 1);  // item 0 is taken: the batch in progress does not count
  ASSERT_TRUE(worker.Push(std::make_unique<int>(1)));
  ASSERT_TRUE(worker.Push(std::make_unique<int>(2)));
  auto refused = std::make_unique<int>(42);
  EXPECT_FALSE(worker.Push(std::move(refused)));
  ASSERT_NE(refused, nullptr);  // not moved from
  EXPECT_EQ(*refused, 42);
  EXPECT_EQ(worker.pushed(), 3u);
  gate.Open();
  worker.Flush();
  EXPECT_EQ(worker.pending(), 0u);
}

TEST(BackgroundWorkerTest, DropQueuedHandsTheQueueToDroppedAndFlushCountsIt) {
  Recorder recorder;
  Gate gate;
  BackgroundWorker<int> worker({.thread_name = "strata-test"}, recorder.Process(&gate),
                               recorder.Dropped());
  ASSERT_TRUE(worker.Push(1));
  ASSERT_TRUE(recorder.AwaitEntered());  // item 1 is taken; the rest stay queued
  ASSERT_TRUE(worker.Push(2));
  ASSERT_TRUE(worker.Push(3, /*urgent=*/true));
  std::future<void> flushed = std::async(std::launch::async, [&] { worker.Flush(); });
  EXPECT_EQ(worker.DropQueued(), 2u);
  gate.Open();
  flushed.get();
  EXPECT_EQ(worker.pending(), 0u);
  absl::MutexLock lock(&recorder.mu);
  EXPECT_THAT(recorder.batches, ElementsAre(ElementsAre(1)));
  EXPECT_THAT(recorder.dropped, ElementsAre(3, 2));
}

TEST(BackgroundWorkerTest, DropQueuedIfDropsTheSelectedItemsAndWaitsForTheBatchInProgress) {
  Recorder recorder;
  Gate gate;
  BackgroundWorker<int> worker({.thread_name = "strata-test"}, recorder.Process(&gate),
                               recorder.Dropped());
  ASSERT_TRUE(worker.Push(1));
  ASSERT_TRUE(recorder.AwaitEntered());  // item 1 is taken; the rest stay queued
  for (int i = 2; i <= 5; ++i) ASSERT_TRUE(worker.Push(int{i}, /*urgent=*/i == 4));
  std::atomic<bool> returned{false};
  std::future<uint64_t> dropped = std::async(std::launch::async, [&] {
    const uint64_t count = worker.DropQueuedIf([](const int& item) { return item % 2 == 0; });
    returned = true;
    return count;
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(30));
  EXPECT_FALSE(returned) << "returned while item 1 was still being processed";
  gate.Open();
  EXPECT_EQ(dropped.get(), 2u);
  worker.Flush();
  EXPECT_EQ(worker.pending(), 0u);
  absl::MutexLock lock(&recorder.mu);
  EXPECT_THAT(recorder.dropped, ElementsAre(4, 2));
  std::vector<int> processed;
  for (const std::vector<int>& batch : recorder.batches) {
    processed.insert(processed.end(), batch.begin(), batch.end());
  }
  EXPECT_THAT(processed, ElementsAre(1, 3, 5));
}

TEST(BackgroundWorkerTest, DropQueuedIfOnAnIdleWorkerReturnsAtOnce) {
  Recorder recorder;
  BackgroundWorker<int> worker({.thread_name = "strata-test"}, recorder.Process(),
                               recorder.Dropped());
  EXPECT_EQ(worker.DropQueuedIf([](const int&) { return true; }), 0u);
  ASSERT_TRUE(worker.Push(7));
  worker.Flush();
  EXPECT_EQ(worker.DropQueuedIf([](const int&) { return true; }), 0u);
}

TEST(BackgroundWorkerTest, StopRunsOrDropsTheQueueAsConfigured) {
  for (const auto on_stop : {BackgroundWorkerOptions::OnStop::kRunQueued,
                             BackgroundWorkerOptions::OnStop::kDropQueued}) {
    Recorder recorder;
    Gate gate;
    BackgroundWorker<int> worker({.thread_name = "strata-test", .on_stop = on_stop},
                                 recorder.Process(&gate), recorder.Dropped());
    for (int i = 1; i <= 4; ++i) ASSERT_TRUE(worker.Push(int{i}));
    ASSERT_TRUE(recorder.AwaitEntered());  // item 1 is taken; 2..4 are queued
    // Stop waits for the batch in progress: the gate opens while it waits.
    std::thread opener([&] {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
      gate.Open();
    });
    worker.Stop();
    opener.join();
    EXPECT_FALSE(worker.Push(5));  // refused from Stop on
    EXPECT_EQ(worker.pending(), 0u);
    absl::MutexLock lock(&recorder.mu);
    size_t processed = 0;
    for (const std::vector<int>& batch : recorder.batches) processed += batch.size();
    if (on_stop == BackgroundWorkerOptions::OnStop::kRunQueued) {
      EXPECT_EQ(processed, 4u);
      EXPECT_TRUE(recorder.dropped.empty());
    } else {
      EXPECT_EQ(processed, 1u);
      EXPECT_THAT(recorder.dropped, ElementsAre(2, 3, 4));
    }
  }
}

TEST(BackgroundWorkerTest, HeldItemsWaitForAFlush) {
  Recorder recorder;
  BackgroundWorker<int> worker({.thread_name = "strata-test"}, recorder.Process());
  worker.SetHeld(true);
  ASSERT_TRUE(worker.Push(1));
  ASSERT_TRUE(worker.Push(2));
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_EQ(worker.pending(), 2u);
  worker.Flush();  // takes the held items it waits for
  EXPECT_EQ(worker.pending(), 0u);
  ASSERT_TRUE(worker.Push(3));
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_EQ(worker.pending(), 1u);  // still held
  worker.SetHeld(false);
  worker.Flush();
  absl::MutexLock lock(&recorder.mu);
  std::vector<int> all;
  for (const std::vector<int>& batch : recorder.batches)
    all.insert(all.end(), batch.begin(), batch.end());
  EXPECT_THAT(all, ElementsAre(1, 2, 3));
}

TEST(BackgroundWorkerTest, RunsNicerByItsIncrement) {
  const int base = getpriority(PRIO_PROCESS, static_cast<id_t>(gettid()));
  std::atomic<int> seen{-100};
  BackgroundWorker<int> worker({.thread_name = "strata-test", .nice = 3}, [&seen](std::span<int>) {
    seen = getpriority(PRIO_PROCESS, static_cast<id_t>(gettid()));
  });
  ASSERT_TRUE(worker.Push(1));
  worker.Flush();
  EXPECT_EQ(seen, std::min(base + 3, 19));
}

}  // namespace
}  // namespace strata::storage
