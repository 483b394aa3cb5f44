#include "core/page_prefault.h"

#include <fcntl.h>
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

// Whether the page at `address` is present in this process's page tables (/proc/self/pagemap's
// bit 63, readable without privileges), whatever the file holds. Not the thread's fault count:
// the sanitizers' shadow memory faults too.
bool Mapped(const void* address) {
  const int fd = open("/proc/self/pagemap", O_RDONLY | O_CLOEXEC);
  EXPECT_GE(fd, 0);
  uint64_t entry = 0;
  const off_t at = static_cast<off_t>(reinterpret_cast<uintptr_t>(address) / kPage * 8);
  EXPECT_EQ(pread(fd, &entry, sizeof(entry), at), static_cast<ssize_t>(sizeof(entry)));
  close(fd);
  return (entry >> 63) != 0;
}

TEST(PagePrefaultTest, WriteAllocatesEveryPageTheRangeTouchesAndNoOther) {
  SharedFile file(16);
  ASSERT_EQ(file.Resident(0), std::vector<bool>(16, false));
  const PrefaultedRegion region(std::span<std::byte>(file.views[0], file.size));
  // Pages 2 (from its middle) to 5 (to its middle).
  region.ForWrite(std::span<std::byte>(file.views[0] + 2 * kPage + 100, 3 * kPage));
  const std::vector<bool> resident = file.Resident(0);
  for (size_t p = 0; p < 16; ++p) EXPECT_EQ(resident[p], p >= 2 && p <= 5) << "page " << p;
}

TEST(PagePrefaultTest, KeepsWhatThePagesHold) {
  SharedFile file(4);
  file.views[1][kPage + 7] = std::byte{0x5a};
  const PrefaultedRegion region(std::span<std::byte>(file.views[0], file.size));
  region.ForWrite(std::span<std::byte>(file.views[0], file.size));
  region.ForRead(std::span<const std::byte>(file.views[0], file.size));
  EXPECT_EQ(file.views[0][kPage + 7], std::byte{0x5a});
  EXPECT_EQ(file.views[0][0], std::byte{0});
}

TEST(PrefaultedRegionTest, FaultsInTheRangeInTheMappingItCoversAndNothingElse) {
  constexpr uint64_t kGranule = PrefaultedRegion::kGranuleBytes;
  SharedFile file((4 << 20) / kPage);
  const PrefaultedRegion writer(std::span<std::byte>(file.views[0], file.size));
  const PrefaultedRegion reader(std::span<std::byte>(file.views[1], file.size));
  // From inside granule 1 to inside granule 4: granules 2 and 3 are covered whole.
  const uint64_t begin = kGranule + 3 * kPage;
  const uint64_t last = begin + 3 * kGranule - 1;
  writer.ForWrite(std::span<std::byte>(file.views[0] + begin, last + 1 - begin));
  for (uint64_t at = begin; at <= last; at += kPage) {
    ASSERT_TRUE(Mapped(file.views[0] + at)) << "offset " << at;
  }
  EXPECT_TRUE(Mapped(file.views[0] + last));
  EXPECT_FALSE(Mapped(file.views[0] + begin - kPage));
  EXPECT_FALSE(Mapped(file.views[0] + last + kPage));
  // The other mapping has the pages in the file, not in its page tables, until it prefaults.
  EXPECT_FALSE(Mapped(file.views[1] + begin));
  reader.ForRead(std::span<const std::byte>(file.views[1] + begin, last + 1 - begin));
  EXPECT_TRUE(Mapped(file.views[1] + begin));
  EXPECT_TRUE(Mapped(file.views[1] + last));
  EXPECT_FALSE(Mapped(file.views[1] + last + kPage));
}

TEST(PrefaultedRegionTest, SkipsTheGranulesItFaultedInWholeAndNotTheRangesEnds) {
  constexpr uint64_t kGranule = PrefaultedRegion::kGranuleBytes;
  SharedFile file((1 << 20) / kPage);
  const PrefaultedRegion region(std::span<std::byte>(file.views[0], file.size));
  const uint64_t begin = kGranule + 3 * kPage;  // granule 1's tail, granules 2 and 3, 4's head
  const std::span<std::byte> range(file.views[0] + begin, 3 * kGranule);
  region.ForWrite(range);
  // Take the range's pages out of this mapping's page tables (the file keeps them): only what the
  // region does not remember comes back on the next prefault.
  ASSERT_EQ(madvise(file.views[0], file.size, MADV_DONTNEED), 0);
  ASSERT_FALSE(Mapped(range.data()));
  region.ForWrite(range);
  EXPECT_TRUE(Mapped(range.data())) << "granule 1's tail is faulted in each time";
  EXPECT_TRUE(Mapped(&range.back())) << "granule 4's head is faulted in each time";
  EXPECT_FALSE(Mapped(file.views[0] + 2 * kGranule)) << "granule 2 was remembered";
  EXPECT_FALSE(Mapped(file.views[0] + 4 * kGranule - kPage)) << "granule 3 was remembered";
  // Reading remembers what writing faulted in (both leave the page in, writable for shared memory).
  region.ForRead(std::span<const std::byte>(file.views[0] + 2 * kGranule, kGranule));
  EXPECT_FALSE(Mapped(file.views[0] + 2 * kGranule));
  EXPECT_EQ(file.views[1][2 * kGranule], std::byte{0}) << "the bytes are untouched";
}

TEST(PrefaultedRegionTest, FaultsInRangesOutsideTheMappingWithoutRememberingThem) {
  constexpr uint64_t kGranule = PrefaultedRegion::kGranuleBytes;
  SharedFile file((1 << 20) / kPage);
  // The region is the file's first half; the second half is outside it.
  const PrefaultedRegion region(std::span<std::byte>(file.views[0], file.size / 2));
  const std::span<std::byte> outside(file.views[0] + file.size / 2, 2 * kGranule);
  region.ForWrite(outside);
  EXPECT_TRUE(Mapped(outside.data()));
  ASSERT_EQ(madvise(file.views[0], file.size, MADV_DONTNEED), 0);
  region.ForWrite(outside);
  EXPECT_TRUE(Mapped(outside.data()));
  // Straddling the region's end counts as outside too; an empty range faults nothing in.
  region.ForWrite(std::span<std::byte>(file.views[0] + file.size / 2 - kGranule, 2 * kGranule));
  EXPECT_TRUE(Mapped(file.views[0] + file.size / 2 - kGranule));
  region.ForWrite(std::span<std::byte>(file.views[0], 0));
  EXPECT_FALSE(Mapped(file.views[0]));
}

}  // namespace
}  // namespace strata
