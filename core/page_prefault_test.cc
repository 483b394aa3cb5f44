#include "core/page_prefault.h"

#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <span>
#include <vector>

#include "core/scoped_fd.h"

namespace strata {
namespace {

const size_t kPage = static_cast<size_t>(sysconf(_SC_PAGESIZE));

// A shared memory file of `pages` pages, none allocated yet, mapped twice (as the daemon and an
// engine map the arena).
struct SharedFile {
  explicit SharedFile(size_t pages) : size(pages * kPage) {
    fd = ScopedFd(memfd_create("prefault-test", MFD_CLOEXEC));
    EXPECT_TRUE(fd.valid());
    EXPECT_EQ(ftruncate(fd.get(), static_cast<off_t>(size)), 0);
    for (std::byte*& view : views) {
      view = static_cast<std::byte*>(
          mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd.get(), 0));
      EXPECT_NE(view, MAP_FAILED);
    }
  }
  ~SharedFile() {
    for (std::byte* view : views) munmap(view, size);
  }
  // Whether each page is resident (allocated in the file: mincore reports the page cache).
  std::vector<bool> Resident(size_t view) const {
    std::vector<unsigned char> flags(size / kPage);
    EXPECT_EQ(mincore(views[view], size, flags.data()), 0);
    return {flags.begin(), flags.end()};
  }

  size_t size;
  ScopedFd fd;
  std::byte* views[2] = {nullptr, nullptr};
};

TEST(PagePrefaultTest, WriteAllocatesEveryPageTheRangeTouchesAndNoOther) {
  SharedFile file(16);
  ASSERT_EQ(file.Resident(0), std::vector<bool>(16, false));
  // Pages 2 (from its middle) to 5 (to its middle).
  PrefaultForWrite(std::span<std::byte>(file.views[0] + 2 * kPage + 100, 3 * kPage));
  const std::vector<bool> resident = file.Resident(0);
  for (size_t p = 0; p < 16; ++p) EXPECT_EQ(resident[p], p >= 2 && p <= 5) << "page " << p;
}

TEST(PagePrefaultTest, KeepsWhatThePagesHold) {
  SharedFile file(4);
  file.views[1][kPage + 7] = std::byte{0x5a};
  PrefaultForWrite(std::span<std::byte>(file.views[0], file.size));
  PrefaultForRead(std::span<const std::byte>(file.views[0], file.size));
  EXPECT_EQ(file.views[0][kPage + 7], std::byte{0x5a});
  EXPECT_EQ(file.views[0][0], std::byte{0});
}

}  // namespace
}  // namespace strata
