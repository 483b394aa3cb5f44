#include "storage/host/shared_arena.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstring>

#include "gtest/gtest.h"

namespace strata::storage {
namespace {

TEST(SharedArena, MapsAMemfdThatAnotherMappingSees) {
  auto arena = SharedArena::Create({.size_bytes = 1 << 20, .name = "arena-test"});
  ASSERT_TRUE(arena.ok()) << arena.status();
  SharedArena& a = **arena;
  EXPECT_EQ(a.size_bytes(), 1u << 20);
  EXPECT_GE(a.fd(), 0);
  EXPECT_TRUE(fcntl(a.fd(), F_GETFD) & FD_CLOEXEC);
  std::memcpy(a.base() + 4096, "strata", 6);

  // What an engine does with the descriptor it receives.
  void* other = mmap(nullptr, 1 << 20, PROT_READ, MAP_SHARED, a.fd(), 0);
  ASSERT_NE(other, MAP_FAILED);
  EXPECT_EQ(std::memcmp(static_cast<char*>(other) + 4096, "strata", 6), 0);
  munmap(other, 1 << 20);
}

TEST(SharedArena, PrefaultAllocatesUpFront) {
  auto arena = SharedArena::Create({.size_bytes = 4 << 20, .prefault = true});
  ASSERT_TRUE(arena.ok()) << arena.status();
  (*arena)->base()[(4 << 20) - 1] = std::byte{1};
}

TEST(SharedArena, RejectsZeroSize) {
  EXPECT_EQ(SharedArena::Create({.size_bytes = 0}).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(SharedArena, HugepagesNeedWholeHugePages) {
  auto arena = SharedArena::Create({.size_bytes = 3 << 20, .use_hugepages = true});
  EXPECT_EQ(arena.status().code(), absl::StatusCode::kInvalidArgument);
}

// Huge pages work when the kernel has some reserved, and fail with a message that says what to
// do otherwise; never a crash or a silent fallback.
TEST(SharedArena, HugepagesWorkOrFailClearly) {
  auto arena = SharedArena::Create({.size_bytes = 2 << 20, .use_hugepages = true});
  if (arena.ok()) {
    EXPECT_TRUE((*arena)->hugepages());
    (*arena)->base()[0] = std::byte{1};
  } else {
    EXPECT_NE(arena.status().message().find("huge pages"), absl::string_view::npos)
        << arena.status();
  }
}

}  // namespace
}  // namespace strata::storage
