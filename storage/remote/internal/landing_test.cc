#include "storage/remote/internal/landing.h"

#include <gtest/gtest.h>
#include <pthread.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "storage/host/shared_arena.h"

namespace strata::storage::remote::internal {
namespace {

// How many of the pages `bytes` touches are resident.
size_t ResidentPages(std::span<std::byte> bytes) {
  const uintptr_t page = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
  const uintptr_t begin = reinterpret_cast<uintptr_t>(bytes.data()) & ~(page - 1);
  const uintptr_t end = reinterpret_cast<uintptr_t>(bytes.data() + bytes.size());
  std::vector<unsigned char> resident((end - begin + page - 1) / page);
  EXPECT_EQ(mincore(reinterpret_cast<void*>(begin), end - begin, resident.data()), 0);
  size_t count = 0;
  for (unsigned char r : resident) count += r & 1;
  return count;
}

// The transport seam as Landing sees it: each Read records which thread started it and how many
// of its local pages were resident then, and completes at once.
class RecordingTransport : public Transport {
 public:
  struct Started {
    std::thread::id thread;
    size_t resident_pages = 0;
  };

  std::string listen_address() const override { return ""; }
  uint64_t region_bytes() const override { return 0; }
  absl::StatusOr<PeerId> Connect(std::string_view, std::chrono::milliseconds) override {
    return absl::UnimplementedError("recording transport");
  }
  void Disconnect(PeerId) override {}
  RequestId Read(PeerId, std::span<const Segment> segments, Deadline, Completion done) override {
    Started started{.thread = std::this_thread::get_id()};
    for (const Segment& segment : segments) started.resident_pages += ResidentPages(segment.local);
    {
      absl::MutexLock lock(&mu_);
      started_.push_back(started);
    }
    std::move(done)(absl::OkStatus());
    return 1;
  }
  RequestId Call(PeerId, std::string, Deadline, Reply done) override {
    std::move(done)(absl::UnimplementedError("recording transport"));
    return 3;
  }
  void Cancel(RequestId) override {}
  std::vector<PeerStats> Peers() const override { return {}; }

  std::vector<Started> started() const {
    absl::MutexLock lock(&mu_);
    return started_;
  }

 private:
  mutable absl::Mutex mu_;
  std::vector<Started> started_ ABSL_GUARDED_BY(mu_);
};

std::unique_ptr<SharedArena> ColdArena() {
  auto arena = SharedArena::Create({.size_bytes = 8 << 20, .name = "landing-test"});
  EXPECT_TRUE(arena.ok()) << arena.status();
  return *std::move(arena);
}

TEST(LandingTest, StartsAReadOffTheCallersThreadWithItsPagesFaultedIn) {
  std::unique_ptr<SharedArena> arena = ColdArena();
  const std::span<std::byte> all(arena->base(), arena->size_bytes());
  ASSERT_EQ(ResidentPages(all), 0u) << "a fresh arena's pages are not allocated yet";
  RecordingTransport transport;
  Landing landing(arena->pages());
  landing.Attach(&transport);
  // Two pieces, the second starting inside a page: every page either touches is faulted in.
  std::vector<Segment> segments = {
      {.remote_offset = 0, .local = all.subspan(0, 1 << 20)},
      {.remote_offset = 1 << 20, .local = all.subspan(5000, 64 << 10)}};
  absl::Notification done;
  absl::Status status = absl::InternalError("not completed");
  landing.Read(1, segments, Deadline::max(), [&](absl::Status s) {
    status = std::move(s);
    done.Notify();
  });
  done.WaitForNotification();
  EXPECT_TRUE(status.ok()) << status;
  const std::vector<RecordingTransport::Started> started = transport.started();
  ASSERT_EQ(started.size(), 1u);
  EXPECT_NE(started[0].thread, std::this_thread::get_id());
  EXPECT_EQ(started[0].resident_pages,
            ResidentPages(all.subspan(0, 1 << 20)) + ResidentPages(all.subspan(5000, 64 << 10)));
  EXPECT_GE(started[0].resident_pages, (1u << 20) / sysconf(_SC_PAGESIZE));
  // Pages no segment touches stay as they were.
  EXPECT_EQ(ResidentPages(all.subspan(4 << 20, 4 << 20)), 0u);
}

TEST(LandingTest, RunsWorkInOrderOnItsThread) {
  std::unique_ptr<SharedArena> arena = ColdArena();
  Landing landing(arena->pages());
  absl::Mutex mu;
  std::vector<int> ran;
  std::vector<std::thread::id> threads;
  absl::Notification last;
  for (int i = 0; i < 5; ++i) {
    landing.Run([&, i] {
      absl::MutexLock lock(&mu);
      ran.push_back(i);
      threads.push_back(std::this_thread::get_id());
      if (i == 4) last.Notify();
    });
  }
  last.WaitForNotification();
  absl::MutexLock lock(&mu);
  EXPECT_EQ(ran, (std::vector<int>{0, 1, 2, 3, 4}));
  for (std::thread::id thread : threads) EXPECT_NE(thread, std::this_thread::get_id());
}

TEST(LandingTest, AfterDetachReadsFailAndWorkRunsOnTheCaller) {
  std::unique_ptr<SharedArena> arena = ColdArena();
  RecordingTransport transport;
  Landing landing(arena->pages());
  landing.Attach(&transport);
  landing.Detach();
  EXPECT_EQ(landing.transport(), nullptr);
  absl::Status status;
  bool completed = false;
  landing.Read(1, {{.local = std::span<std::byte>(arena->base(), 4096)}}, Deadline::max(),
               [&](absl::Status s) {
                 status = std::move(s);
                 completed = true;
               });
  EXPECT_TRUE(completed);
  EXPECT_EQ(status.code(), absl::StatusCode::kUnavailable) << status;
  EXPECT_TRUE(transport.started().empty());
  std::thread::id ran_on;
  landing.Run([&] { ran_on = std::this_thread::get_id(); });
  EXPECT_EQ(ran_on, std::this_thread::get_id());
}

TEST(LandingTest, ReadsBeforeAnyTransportFail) {
  std::unique_ptr<SharedArena> arena = ColdArena();
  Landing landing(arena->pages());
  absl::Status status;
  landing.Read(1, {}, Deadline::max(), [&](absl::Status s) { status = std::move(s); });
  EXPECT_EQ(status.code(), absl::StatusCode::kUnavailable) << status;
}

}  // namespace
}  // namespace strata::storage::remote::internal
