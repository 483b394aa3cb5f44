#include "storage/tiered/task_pool.h"

#include <atomic>
#include <chrono>
#include <future>
#include <thread>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace strata::storage {
namespace {

using ::testing::ElementsAre;

TEST(TaskPoolTest, WithoutThreadsTheCallerRunsTheBatchInOrderInWait) {
  TaskPool pool("strata-test", 0);
  std::vector<int> order;
  TaskPool::Batch batch(pool);
  for (int i = 0; i < 4; ++i) batch.Run([&order, i] { order.push_back(i); });
  EXPECT_TRUE(order.empty());  // nothing runs before Wait
  const std::thread::id caller = std::this_thread::get_id();
  std::thread::id ran_on;
  batch.Run([&] { ran_on = std::this_thread::get_id(); });
  batch.Wait();
  EXPECT_THAT(order, ElementsAre(0, 1, 2, 3));
  EXPECT_EQ(ran_on, caller);
}

TEST(TaskPoolTest, ThreadsRunTasksWhileTheCallerGoesOn) {
  TaskPool pool("strata-test", 1);
  std::promise<std::thread::id> ran_on;
  std::future<std::thread::id> ran = ran_on.get_future();
  TaskPool::Batch batch(pool);
  batch.Run([&] { ran_on.set_value(std::this_thread::get_id()); });
  // The caller has not waited: only the pool's thread can run it.
  ASSERT_EQ(ran.wait_for(std::chrono::seconds(10)), std::future_status::ready);
  EXPECT_NE(ran.get(), std::this_thread::get_id());
  batch.Wait();
}

TEST(TaskPoolTest, WaitReturnsOnceEveryTaskRanAndTheCallerHelps) {
  TaskPool pool("strata-test", 1);
  std::promise<void> release;
  std::shared_future<void> released = release.get_future().share();
  std::atomic<int> ran{0};
  std::atomic<int> on_caller{0};
  const std::thread::id caller = std::this_thread::get_id();
  {
    TaskPool::Batch batch(pool);
    // The pool's one thread is held by the first task; the rest can only run on the caller.
    std::promise<void> holding;
    batch.Run([&] {
      holding.set_value();
      released.wait();
      ++ran;
    });
    holding.get_future().wait();
    for (int i = 0; i < 8; ++i) {
      batch.Run([&] {
        if (std::this_thread::get_id() == caller) ++on_caller;
        ++ran;
      });
    }
    std::thread opener([&] {
      // Once the caller has run the other 8, the held task may finish.
      const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
      while (on_caller.load() < 8 && std::chrono::steady_clock::now() < deadline) {
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
      }
      release.set_value();
    });
    batch.Wait();
    EXPECT_EQ(ran.load(), 9);
    opener.join();
  }
  EXPECT_EQ(on_caller.load(), 8);
}

TEST(TaskPoolTest, BatchesOfSeveralCallersEachGetTheirOwnTasksDone) {
  TaskPool pool("strata-test", 2);
  constexpr int kCallers = 4;
  constexpr int kTasks = 200;
  std::vector<std::vector<int>> done(kCallers, std::vector<int>(kTasks, 0));
  std::vector<std::thread> callers;
  for (int c = 0; c < kCallers; ++c) {
    callers.emplace_back([&pool, &done, c] {
      TaskPool::Batch batch(pool);
      for (int t = 0; t < kTasks; ++t) batch.Run([&done, c, t] { ++done[c][t]; });
      batch.Wait();
      for (int t = 0; t < kTasks; ++t) EXPECT_EQ(done[c][t], 1) << c << " " << t;
    });
  }
  for (std::thread& caller : callers) caller.join();
}

TEST(TaskPoolTest, ABatchWaitsInItsDestructor) {
  TaskPool pool("strata-test", 1);
  std::atomic<int> ran{0};
  {
    TaskPool::Batch batch(pool);
    for (int i = 0; i < 16; ++i) {
      batch.Run([&ran] {
        std::this_thread::sleep_for(std::chrono::microseconds(200));
        ++ran;
      });
    }
  }
  EXPECT_EQ(ran.load(), 16);
}

}  // namespace
}  // namespace strata::storage
