#include "core/background_prefault.h"

#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <span>
#include <thread>

#include "gtest/gtest.h"

namespace strata {
namespace {

// A shared memory file of `size` bytes mapped twice: one mapping allocates (the daemon's), the
// other only maps what is there (an engine's).
struct TwoMappings {
  explicit TwoMappings(uint64_t size) : size(size) {
    fd = ::memfd_create("background-prefault-test", MFD_CLOEXEC);
    EXPECT_GE(fd, 0);
    EXPECT_EQ(::ftruncate(fd, static_cast<off_t>(size)), 0);
    owner = Map();
    engine = Map();
  }
  ~TwoMappings() {
    ::munmap(owner, size);
    ::munmap(engine, size);
    ::close(fd);
  }
  std::byte* Map() const {
    return static_cast<std::byte*>(
        ::mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0));
  }
  // Bytes of the file that hold memory.
  uint64_t Allocated() const {
    struct stat st {};
    EXPECT_EQ(::fstat(fd, &st), 0);
    return static_cast<uint64_t>(st.st_blocks) * 512;
  }

  const uint64_t size;
  int fd = -1;
  std::byte* owner = nullptr;
  std::byte* engine = nullptr;
};

bool WaitFinished(const BackgroundPrefault& prefault) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (!prefault.finished() && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return prefault.finished();
}

TEST(BackgroundPrefaultTest, AllocatesEveryPageOnItsThread) {
  const uint64_t size = 2 * BackgroundPrefault::kStepBytes + (1 << 20);  // a partial last step
  TwoMappings file(size);
  const PrefaultedRegion region(std::span<std::byte>(file.owner, size));
  EXPECT_EQ(file.Allocated(), 0u);
  const BackgroundPrefault prefault(region, BackgroundPrefault::Mode::kAllocate);
  ASSERT_TRUE(WaitFinished(prefault));
  EXPECT_EQ(prefault.done_bytes(), size);
  EXPECT_EQ(file.Allocated(), size);
  file.owner[size - 1] = std::byte{7};  // still an ordinary mapping
  EXPECT_EQ(file.engine[size - 1], std::byte{7});
}

// An engine's mapping waits for the owner's pages and never allocates one itself: the file's
// allocation is exactly what the owner wrote, until the owner has allocated all of it.
TEST(BackgroundPrefaultTest, ResidentOnlyMapsWhatTheOwnerAllocated) {
  const uint64_t size = 3 * BackgroundPrefault::kStepBytes;
  TwoMappings file(size);
  const PrefaultedRegion engine(std::span<std::byte>(file.engine, size));
  std::memset(file.owner + BackgroundPrefault::kStepBytes, 1, BackgroundPrefault::kStepBytes);
  const BackgroundPrefault mapping(engine, BackgroundPrefault::Mode::kResidentOnly,
                                   std::chrono::seconds(30), std::chrono::milliseconds(5));
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (mapping.done_bytes() < BackgroundPrefault::kStepBytes &&
         std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  EXPECT_EQ(mapping.done_bytes(), BackgroundPrefault::kStepBytes) << "the one step the owner wrote";
  EXPECT_EQ(file.Allocated(), BackgroundPrefault::kStepBytes) << "nothing allocated by the engine";
  EXPECT_FALSE(mapping.finished());

  const PrefaultedRegion owner(std::span<std::byte>(file.owner, size));
  const BackgroundPrefault allocate(owner, BackgroundPrefault::Mode::kAllocate);
  ASSERT_TRUE(WaitFinished(allocate));
  ASSERT_TRUE(WaitFinished(mapping));
  EXPECT_EQ(mapping.done_bytes(), size);
}

TEST(BackgroundPrefaultTest, GivesUpAndStopsPromptly) {
  const uint64_t size = BackgroundPrefault::kStepBytes;
  TwoMappings file(size);
  const PrefaultedRegion engine(std::span<std::byte>(file.engine, size));
  {
    const BackgroundPrefault never(engine, BackgroundPrefault::Mode::kResidentOnly,
                                   std::chrono::milliseconds(50), std::chrono::milliseconds(5));
    EXPECT_TRUE(WaitFinished(never)) << "nothing comes: it gives up";
    EXPECT_EQ(never.done_bytes(), 0u);
  }
  const auto start = std::chrono::steady_clock::now();
  {
    const BackgroundPrefault waiting(engine, BackgroundPrefault::Mode::kResidentOnly,
                                     std::chrono::minutes(5), std::chrono::seconds(60));
  }
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5))
      << "destruction does not wait out the retry period";
  EXPECT_EQ(file.Allocated(), 0u);
}

}  // namespace
}  // namespace strata
