#include "strata/page_store.h"

#include <chrono>
#include <cstring>
#include <numeric>
#include <string>
#include <thread>
#include <vector>

#include "connector/src/engine_client.h"
#include "connector/src/testing/test_daemon.h"
#include "core/key_hasher.h"
#include "gtest/gtest.h"
#include "tests/support/test_layout.h"

namespace strata::connector {
namespace {

using std::chrono::milliseconds;
using testing::TestDaemon;

// 2 layers x 2 heads x 16 dims fp16, 16-token pages: 256 bytes per token, 4 KiB per page.
KvLayout PageLayout() { return test_support::SmallLayout({.model_id = "page-store-test"}); }

PageStoreOptions StoreOptions(const std::string& socket_path) {
  PageStoreOptions options;
  options.socket_path = socket_path;
  options.engine_id = "page-store-test";
  options.layout = PageLayout();
  options.lookup_budget = milliseconds(1000);
  options.io_timeout = milliseconds(2000);
  options.reconnect_min_backoff = milliseconds(10);
  options.reconnect_max_backoff = milliseconds(20);
  return options;
}

std::vector<std::string> PageKeys(size_t n, const std::string& prefix = "page-") {
  std::vector<std::string> keys;
  for (size_t i = 0; i < n; ++i) keys.push_back(prefix + std::to_string(i));
  return keys;
}

// Host memory for `n` pages, each split into `segments_per_page` equal segments (as SGLang's
// layer-first pools scatter a page), filled with a pattern that differs per page and `seed`.
class HostPages {
 public:
  HostPages(size_t n, uint64_t page_bytes, size_t segments_per_page, uint8_t seed = 1)
      : bytes_(n * page_bytes) {
    for (size_t i = 0; i < bytes_.size(); ++i) {
      bytes_[i] = static_cast<std::byte>((i * 131 + seed * 7 + i / page_bytes) & 0xff);
    }
    const uint64_t segment_bytes = page_bytes / segments_per_page;
    for (size_t p = 0; p < n; ++p) {
      HostPage& page = pages_.emplace_back();
      for (size_t s = 0; s < segments_per_page; ++s) {
        // Segments of a page are laid out in reverse in memory: the store must follow the
        // segment order, not addresses.
        const size_t slot = segments_per_page - 1 - s;
        page.segments.push_back(
            {bytes_.data() + p * page_bytes + slot * segment_bytes, segment_bytes});
      }
    }
  }
  std::span<const HostPage> pages() const { return pages_; }
  // Page `p`'s payload in segment order.
  std::vector<std::byte> Payload(size_t p) const {
    std::vector<std::byte> out;
    for (const HostSegment& s : pages_[p].segments)
      out.insert(out.end(), s.data, s.data + s.size_bytes);
    return out;
  }
  void Clear() { std::fill(bytes_.begin(), bytes_.end(), std::byte{0}); }

 private:
  std::vector<std::byte> bytes_;
  std::vector<HostPage> pages_;
};

class PageStoreTest : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_TRUE(daemon_.Start().ok()); }

  std::unique_ptr<PageStore> NewStore() {
    auto store = PageStore::Create(StoreOptions(daemon_.socket_path()));
    EXPECT_TRUE(store.ok()) << store.status();
    return store.ok() ? std::move(*store) : nullptr;
  }

  TestDaemon daemon_;
};

TEST_F(PageStoreTest, RejectsUnusableOptions) {
  PageStoreOptions options = StoreOptions("");
  EXPECT_EQ(PageStore::Create(options).status().code(), absl::StatusCode::kInvalidArgument);
  options = StoreOptions(daemon_.socket_path());
  options.layout.num_layers = 0;
  EXPECT_EQ(PageStore::Create(options).status().code(), absl::StatusCode::kInvalidArgument);
  options = StoreOptions(daemon_.socket_path());
  options.io_timeout = milliseconds(0);
  EXPECT_EQ(PageStore::Create(options).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST_F(PageStoreTest, PutThenGetIsByteExact) {
  auto store = NewStore();
  ASSERT_NE(store, nullptr);
  EXPECT_EQ(store->page_bytes(), PageLayout().chunk_bytes(16));
  const auto keys = PageKeys(6);
  HostPages source(keys.size(), store->page_bytes(), 4, 3);
  auto put = store->Put(keys, source.pages());
  ASSERT_TRUE(put.ok()) << put.status();
  EXPECT_EQ(*put, std::vector<bool>(keys.size(), true));
  EXPECT_EQ(store->Stats().pages_stored, keys.size());

  // Read back into a differently segmented destination: the payload is what counts.
  HostPages dest(keys.size(), store->page_bytes(), 2, 9);
  dest.Clear();
  auto got = store->Get(keys, dest.pages());
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(*got, std::vector<bool>(keys.size(), true));
  for (size_t p = 0; p < keys.size(); ++p) {
    EXPECT_EQ(dest.Payload(p), source.Payload(p)) << "page " << p;
  }
  EXPECT_EQ(store->Stats().pages_loaded, keys.size());

  // Storing again finds them present.
  put = store->Put(keys, source.pages());
  ASSERT_TRUE(put.ok());
  EXPECT_EQ(*put, std::vector<bool>(keys.size(), true));
  EXPECT_EQ(store->Stats().pages_already_present, keys.size());
}

TEST_F(PageStoreTest, ExistsCountsLeadingPages) {
  auto store = NewStore();
  ASSERT_NE(store, nullptr);
  auto keys = PageKeys(5);
  HostPages source(3, store->page_bytes(), 1);
  // Store pages 0..2 only.
  ASSERT_TRUE(store->Put(std::span(keys).first(3), source.pages()).ok());
  EXPECT_EQ(*store->Exists(keys), 3u);
  EXPECT_EQ(*store->Exists(std::span(keys).first(2)), 2u);
  EXPECT_EQ(*store->Exists(std::span(keys).subspan(3)), 0u);
  EXPECT_EQ(*store->Exists({}), 0u);
  // A gap ends the run.
  std::vector<std::string> gapped = {keys[0], "never-stored", keys[1]};
  EXPECT_EQ(*store->Exists(gapped), 1u);
}

TEST_F(PageStoreTest, MissingKeysAreReportedMissing) {
  auto store = NewStore();
  ASSERT_NE(store, nullptr);
  const auto keys = PageKeys(4);
  HostPages source(2, store->page_bytes(), 1);
  ASSERT_TRUE(store->Put(std::span(keys).first(2), source.pages()).ok());
  HostPages dest(4, store->page_bytes(), 1);
  auto got = store->Get(keys, dest.pages());
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(*got, (std::vector<bool>{true, true, false, false}));
  EXPECT_EQ(dest.Payload(0), source.Payload(0));
  EXPECT_EQ(dest.Payload(1), source.Payload(1));

  // The run ends at the first missing page, even when later ones exist.
  std::vector<std::string> gapped = {"never-stored", keys[0]};
  HostPages dest2(2, store->page_bytes(), 1);
  got = store->Get(gapped, dest2.pages());
  ASSERT_TRUE(got.ok());
  EXPECT_EQ(*got, (std::vector<bool>{false, false}));
}

TEST_F(PageStoreTest, WrongSizedPagesAreNotStoredOrServed) {
  auto store = NewStore();
  ASSERT_NE(store, nullptr);
  const auto keys = PageKeys(2);
  HostPages source(2, store->page_bytes(), 1);
  std::vector<HostPage> pages(source.pages().begin(), source.pages().end());
  pages[1].segments[0].size_bytes -= 1;
  auto put = store->Put(keys, pages);
  ASSERT_TRUE(put.ok());
  EXPECT_EQ(*put, (std::vector<bool>{true, false}));
  EXPECT_EQ(*store->Exists(keys), 1u);
  auto got = store->Get(keys, pages);
  ASSERT_TRUE(got.ok());
  EXPECT_EQ(*got, (std::vector<bool>{true, false}));
  EXPECT_EQ(store->Put(keys, std::span(pages).first(1)).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST_F(PageStoreTest, KeysAreDeterministicAndApartFromTokenKeys) {
  auto a = NewStore();
  auto b = NewStore();
  ASSERT_NE(a, nullptr);
  ASSERT_NE(b, nullptr);
  EXPECT_EQ(a->KeyOf("abc"), b->KeyOf("abc"));
  EXPECT_NE(a->KeyOf("abc"), a->KeyOf("abd"));
  EXPECT_EQ(a->KeyOf("abc").layout_fingerprint(), PageLayout().Fingerprint());
  PageStoreOptions other = StoreOptions(daemon_.socket_path());
  other.layout.model_id = "another-model";
  auto c = PageStore::Create(other);
  ASSERT_TRUE(c.ok());
  EXPECT_NE((*c)->KeyOf("abc"), a->KeyOf("abc"));

  // A page stored by its string is not found by a token-keyed lookup of the same layout, and the
  // other way around: the two key spaces do not meet.
  HostPages source(1, a->page_bytes(), 1);
  ASSERT_TRUE(a->Put(PageKeys(1), source.pages()).ok());
  std::vector<uint32_t> tokens(16);
  std::iota(tokens.begin(), tokens.end(), 0);
  const auto token_keys = KeyHasher::Create(PageLayout(), {})->PrefixKeys(tokens, {});
  ASSERT_EQ(token_keys.size(), 1u);
  EXPECT_NE(token_keys[0], a->KeyOf(PageKeys(1)[0]));
  internal::EngineClientOptions client_options;
  client_options.socket_path = daemon_.socket_path();
  client_options.layout = PageLayout();
  auto client = internal::EngineClient::Create(client_options);
  ASSERT_TRUE(client.ok());
  auto hit = (*client)->LookupChain(token_keys, milliseconds(1000));
  ASSERT_TRUE(hit.ok()) << hit.status();
  EXPECT_EQ(hit->chunks, 0u);
}

TEST_F(PageStoreTest, CorruptedArenaByteIsReportedMissing) {
  auto store = NewStore();
  ASSERT_NE(store, nullptr);
  const auto keys = PageKeys(3);
  HostPages source(3, store->page_bytes(), 2);
  ASSERT_TRUE(store->Put(keys, source.pages()).ok());

  // Another session of the same layout leases page 1 (telling the daemon it verifies, so the
  // daemon does not check) and flips a byte of it in the shared arena.
  internal::EngineClientOptions client_options;
  client_options.socket_path = daemon_.socket_path();
  client_options.layout = PageLayout();
  auto client = internal::EngineClient::Create(client_options);
  ASSERT_TRUE(client.ok());
  const ChunkKey key = store->KeyOf(keys[1]);
  auto leased = (*client)->PrepareLoad(std::span(&key, 1), 0, milliseconds(1000),
                                       /*verifies=*/true);
  ASSERT_TRUE(leased.ok()) << leased.status();
  ASSERT_EQ(leased->value.size(), 1u);
  ASSERT_TRUE(leased->value[0].status.ok()) << leased->value[0].status;
  const internal::ArenaExtent extent = leased->value[0].extents.at(0);
  leased->arena->base()[extent.offset + 7] ^= std::byte{0x5a};
  ASSERT_TRUE(
      (*client)
          ->Release(leased->generation, std::span(&leased->value[0].handle, 1), milliseconds(1000))
          .ok());

  HostPages dest(3, store->page_bytes(), 1);
  auto got = store->Get(keys, dest.pages());
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(*got, (std::vector<bool>{true, false, false}))
      << "page 1 is corrupt: it and every later page are missing";
  EXPECT_EQ(dest.Payload(0), source.Payload(0));
  EXPECT_EQ(store->Stats().pages_corrupt, 1u);
}

TEST(PageStoreNoDaemonTest, AbsentDaemonFailsCleanly) {
  TestDaemon daemon;  // never started
  auto store = PageStore::Create(StoreOptions(daemon.socket_path()));
  ASSERT_TRUE(store.ok()) << store.status();
  const auto keys = PageKeys(2);
  EXPECT_FALSE((*store)->Exists(keys).ok());
  HostPages pages(2, (*store)->page_bytes(), 1);
  EXPECT_FALSE((*store)->Get(keys, pages.pages()).ok());
  EXPECT_FALSE((*store)->Put(keys, pages.pages()).ok());
  const PageStoreStats stats = (*store)->Stats();
  EXPECT_FALSE(stats.connected);
  EXPECT_GE(stats.lookup_failures, 1u);
}

// Polls `fn` until it returns true or about 2 s pass (the store reconnects after its backoff).
template <class F>
bool Eventually(F fn) {
  for (int i = 0; i < 200; ++i) {
    if (fn()) return true;
    std::this_thread::sleep_for(milliseconds(10));
  }
  return false;
}

TEST_F(PageStoreTest, SurvivesDaemonRestart) {
  auto store = NewStore();
  ASSERT_NE(store, nullptr);
  const auto keys = PageKeys(3);
  HostPages source(3, store->page_bytes(), 1);
  ASSERT_TRUE(store->Put(keys, source.pages()).ok());
  ASSERT_EQ(*store->Exists(keys), 3u);

  daemon_.Stop();
  EXPECT_FALSE(store->Exists(keys).ok());
  HostPages dest(3, store->page_bytes(), 1);
  EXPECT_FALSE(store->Get(keys, dest.pages()).ok());

  // Back with the same tier: the pages are found and served again.
  ASSERT_TRUE(daemon_.Start(/*keep_tier=*/true).ok());
  EXPECT_TRUE(Eventually([&] {
    auto n = store->Exists(keys);
    return n.ok() && *n == 3;
  }));
  auto got = store->Get(keys, dest.pages());
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(*got, std::vector<bool>(3, true));
  EXPECT_EQ(dest.Payload(2), source.Payload(2));

  // Back with an empty tier: nothing is found; storing works again.
  daemon_.Stop();
  ASSERT_TRUE(daemon_.Start(/*keep_tier=*/false).ok());
  EXPECT_TRUE(Eventually([&] {
    auto n = store->Exists(keys);
    return n.ok() && *n == 0;
  }));
  auto put = store->Put(keys, source.pages());
  ASSERT_TRUE(put.ok()) << put.status();
  EXPECT_EQ(*put, std::vector<bool>(3, true));
  EXPECT_EQ(*store->Exists(keys), 3u);
}

}  // namespace
}  // namespace strata::connector
