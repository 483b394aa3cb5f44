// The C ABI of position-independent chunks (strata/pic_connector_c.h) against the daemon's real
// session server with a device pool: a chunk written through one C connector is shared by
// another at another offset; plans' arrays, separators, bad input, small buffers and Verify.
#include "strata/pic_connector_c.h"

#include <cstring>
#include <numeric>
#include <string>
#include <vector>

#include "connector/src/testing/pool_pages.h"
#include "connector/src/testing/test_daemon.h"
#include "gtest/gtest.h"

extern "C" int strata_pic_c_header_check(void);

namespace {

using strata::connector::testing::FillPoolPages;
using strata::connector::testing::PoolPagesHold;
using strata::connector::testing::TestDaemon;

constexpr uint32_t kPad = 7;

// The options point into `socket_path`, which must outlive them.
strata_connector_options Options(const std::string& socket_path) {
  strata_connector_options options;
  strata_options_init(&options);
  options.socket_path = socket_path.c_str();
  options.engine_id = "pic-c-test";
  options.model_id = "pic-c-model";
  options.num_layers = 2;
  options.num_kv_heads = 2;
  options.head_dim = 8;
  options.dtype = STRATA_DTYPE_FLOAT16;
  options.chunk_tokens = 16;
  options.block_size = 16;
  options.io_timeout_ms = 2000;
  options.reconnect_min_backoff_ms = 1;
  options.reconnect_max_backoff_ms = 1;
  options.device_backend = "host";
  return options;
}

std::vector<uint32_t> Passage(uint32_t first, uint32_t n) {
  std::vector<uint32_t> tokens(n);
  std::iota(tokens.begin(), tokens.end(), first);
  return tokens;
}

struct Plan {
  strata_pic_plan_info info{};
  std::vector<strata_pic_chunk_info> chunks;
};

Plan Read(const strata_pic_plan* plan) {
  Plan out;
  EXPECT_EQ(strata_pic_plan_info_get(plan, &out.info), STRATA_OK);
  out.chunks.resize(out.info.num_chunks);
  for (size_t i = 0; i < out.chunks.size(); ++i) {
    EXPECT_EQ(strata_pic_plan_chunk(plan, i, &out.chunks[i]), STRATA_OK);
  }
  return out;
}

strata::storage::DevicePoolGeometry Geometry(const strata_pic_plan_info& info) {
  return {.num_layers = info.pool_num_layers,
          .num_pages = info.pool_num_pages,
          .page_bytes = info.pool_page_bytes};
}

std::byte* Base(const strata_pic_plan_info& info) {
  return reinterpret_cast<std::byte*>(info.pool_base);
}

class PicConnectorCTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(daemon_.Start().ok());
    socket_ = daemon_.socket_path();
  }
  strata_pic_connector* Create() {
    const strata_connector_options options = Options(socket_);
    strata_pic_connector* connector = nullptr;
    EXPECT_EQ(strata_pic_connector_create(&options, kPad, &connector), STRATA_OK)
        << strata_last_error();
    return connector;
  }

  // The pool of the options' layout.
  strata::storage::DevicePoolStats PoolStats() {
    strata::KvLayout layout;
    layout.model_id = "pic-c-model";
    layout.num_layers = 2;
    layout.num_kv_heads = 2;
    layout.head_dim = 8;
    layout.dtype = strata::KvDtype::kFloat16;
    layout.positional = strata::PositionalFormat::kRopeApplied;
    layout.chunk_tokens = 16;
    return (*daemon_.device_pools()->ForLayout(layout))->Stats();
  }

  // 2 layers x 1 KiB per 16-token page: 8 pages.
  TestDaemon daemon_{{.device_pool_bytes = 8 * 2048}};
  std::string socket_;
};

TEST_F(PicConnectorCTest, HeaderCompilesAsCAndDefaults) {
  EXPECT_EQ(strata_pic_c_header_check(), STRATA_INVALID_ARGUMENT);
  strata_pic_request_options options;
  strata_pic_request_options_init(&options);
  EXPECT_EQ(options.struct_size, sizeof(strata_pic_request_options));
  EXPECT_EQ(options.recompute, STRATA_PIC_MEPIC);
  EXPECT_EQ(options.legolink_tokens, 16u);
  EXPECT_EQ(options.blend_ratio, 0.15);
}

TEST_F(PicConnectorCTest, AChunkWrittenThroughOneConnectorIsSharedByAnother) {
  strata_pic_connector* writer = Create();
  const std::vector<uint32_t> a = Passage(1000, 40), b = Passage(2000, 16);
  std::vector<uint32_t> first = a;
  first.push_back(99);
  first.insert(first.end(), b.begin(), b.end());
  first.push_back(99);
  first.push_back(5);
  const uint32_t separator[] = {99};
  strata_pic_span spans[1];
  size_t count = 0;
  EXPECT_EQ(
      strata_pic_markers_from_separator(first.data(), first.size(), separator, 1, spans, 1, &count),
      STRATA_OUT_OF_RANGE);
  EXPECT_EQ(count, 2u) << "the spans needed";
  strata_pic_span found[2];
  ASSERT_EQ(
      strata_pic_markers_from_separator(first.data(), first.size(), separator, 1, found, 2, &count),
      STRATA_OK);
  EXPECT_EQ(found[1].begin, 41u);
  EXPECT_EQ(found[1].end, 57u);

  strata_pic_plan* plan = nullptr;
  ASSERT_EQ(strata_pic_begin(writer, "r", first.data(), first.size(), found, 2, nullptr, &plan),
            STRATA_OK)
      << strata_last_error();
  Plan written = Read(plan);
  ASSERT_EQ(written.chunks.size(), 2u);
  EXPECT_EQ(written.chunks[0].state, STRATA_PIC_WRITE);
  EXPECT_EQ(written.chunks[0].num_pool_pages, 3u);
  EXPECT_EQ(written.chunks[0].padded.end, 48u);
  EXPECT_EQ(written.info.padded_tokens[0], kPad);
  ASSERT_EQ(written.info.has_pool, 1);
  EXPECT_EQ(written.info.pool_block_tokens, 16u);
  EXPECT_EQ(written.info.pool_keys_rotated, 1) << "a rope_applied layout";
  const std::vector<uint32_t> a_pages(written.chunks[0].pool_pages,
                                      written.chunks[0].pool_pages + 3);
  FillPoolPages(Base(written.info), Geometry(written.info), a_pages, 0xa1);
  EXPECT_EQ(strata_pic_plan_chunk(plan, 2, &written.chunks[0]), STRATA_OUT_OF_RANGE);
  strata_pic_plan_destroy(plan);
  strata_pic_plan* published = nullptr;
  ASSERT_EQ(strata_pic_publish(writer, "r", &published), STRATA_OK) << strata_last_error();
  EXPECT_EQ(Read(published).chunks[0].state, STRATA_PIC_SHARED);
  strata_pic_plan_destroy(published);

  strata_pic_connector* reader = Create();
  std::vector<uint32_t> second = Passage(3000, 3);
  second.insert(second.end(), a.begin(), a.end());
  const strata_pic_span chunk = {3, 43};
  strata_pic_request_options options;
  strata_pic_request_options_init(&options);
  options.recompute = STRATA_PIC_LEGOLINK;
  options.legolink_tokens = 4;
  ASSERT_EQ(strata_pic_begin(reader, "r", second.data(), second.size(), &chunk, 1, &options, &plan),
            STRATA_OK)
      << strata_last_error();
  const Plan shared = Read(plan);
  ASSERT_EQ(shared.chunks.size(), 1u);
  EXPECT_EQ(shared.chunks[0].state, STRATA_PIC_SHARED);
  EXPECT_STREQ(shared.chunks[0].why_private, "");
  EXPECT_EQ(std::vector<uint32_t>(shared.chunks[0].pool_pages, shared.chunks[0].pool_pages + 3),
            a_pages);
  EXPECT_TRUE(PoolPagesHold(Base(shared.info), Geometry(shared.info), a_pages, 0xa1));
  // [3 prompt + 13 pads][a: 8 pads + 40]: LegoLink-4 recomputes the prompt, a's pads and 4 of
  // its tokens.
  ASSERT_EQ(shared.info.num_recompute_spans, 1u);
  EXPECT_EQ(shared.info.recompute_from_layer_zero[0].begin, 0u);
  EXPECT_EQ(shared.info.recompute_from_layer_zero[0].end, 28u);
  EXPECT_EQ(shared.info.recomputed_tokens, 28u);
  // Its block table: the prompt, then a's 3 blocks, all the reader's own (a rope_applied pool is
  // read through re-rotated copies): block 1 of a recomputed in part, each filled from its page.
  ASSERT_EQ(shared.info.num_blocks, 4u);
  EXPECT_EQ(shared.info.own_blocks, 4u);
  strata_pic_block_info block;
  ASSERT_EQ(strata_pic_plan_block(plan, 0, &block), STRATA_OK);
  EXPECT_EQ(block.has_fill, 0) << "the prompt";
  for (uint32_t j = 1; j < 4; ++j) {
    ASSERT_EQ(strata_pic_plan_block(plan, j, &block), STRATA_OK);
    EXPECT_EQ(block.pool, 0);
    EXPECT_EQ(block.index, j);
    EXPECT_EQ(block.has_fill, 1);
    EXPECT_EQ(block.fill_from_page, a_pages[j - 1]);
    EXPECT_EQ(block.position, j * 16) << "a whole chunk's blocks, one after another";
  }
  EXPECT_EQ(strata_pic_plan_block(plan, 4, &block), STRATA_OUT_OF_RANGE);
  EXPECT_EQ(strata_pic_plan_block(plan, 0, nullptr), STRATA_INVALID_ARGUMENT);
  strata_pic_plan_destroy(plan);
  // The reader's measure of a's 48 padded tokens reaches the daemon; bad reports do not.
  const std::vector<float> importance(48, 0.25f);
  EXPECT_EQ(strata_pic_report_importance(reader, "r", 0, importance.data(), 48), STRATA_OK)
      << strata_last_error();
  EXPECT_EQ(strata_pic_report_importance(reader, "r", 0, importance.data(), 47),
            STRATA_INVALID_ARGUMENT);
  EXPECT_EQ(strata_pic_report_importance(reader, "r", 1, importance.data(), 48),
            STRATA_OUT_OF_RANGE);
  EXPECT_EQ(strata_pic_report_importance(reader, "r", 0, nullptr, 48), STRATA_INVALID_ARGUMENT);
  EXPECT_EQ(strata_pic_report_importance(reader, "nope", 0, importance.data(), 48),
            STRATA_NOT_FOUND);
  EXPECT_EQ(strata_pic_verify(reader, "r"), STRATA_OK);
  EXPECT_EQ(strata_pic_end(reader, "r"), STRATA_OK);
  EXPECT_EQ(strata_pic_end(reader, "r"), STRATA_NOT_FOUND);
  EXPECT_EQ(strata_pic_open_requests(writer), 1u);
  strata_pic_connector_destroy(writer);  // ends "r"
  strata_pic_connector_destroy(reader);
  const strata::storage::DevicePoolStats stats = PoolStats();
  EXPECT_EQ(stats.referenced_pages, 0u) << "every request ended";
  EXPECT_EQ(stats.committed_pages, 4u) << "a and b stay for later requests";
}

TEST_F(PicConnectorCTest, BadInputIsRefused) {
  strata_pic_connector* connector = Create();
  const std::vector<uint32_t> prompt = Passage(1000, 64);
  const strata_pic_span overlapping[] = {{0, 30}, {20, 40}};
  strata_pic_plan* plan = reinterpret_cast<strata_pic_plan*>(0x1);
  EXPECT_EQ(strata_pic_begin(connector, "r", prompt.data(), prompt.size(), overlapping, 2, nullptr,
                             &plan),
            STRATA_INVALID_ARGUMENT);
  EXPECT_EQ(plan, nullptr);
  EXPECT_NE(std::string(strata_last_error()), "");
  strata_pic_request_options options;
  strata_pic_request_options_init(&options);
  options.recompute = 9;
  EXPECT_EQ(strata_pic_begin(connector, "r", prompt.data(), prompt.size(), overlapping, 1, &options,
                             &plan),
            STRATA_INVALID_ARGUMENT);
  options.struct_size = 3;
  EXPECT_EQ(strata_pic_begin(connector, "r", prompt.data(), prompt.size(), overlapping, 1, &options,
                             &plan),
            STRATA_INVALID_ARGUMENT);
  EXPECT_EQ(strata_pic_begin(connector, nullptr, prompt.data(), prompt.size(), overlapping, 1,
                             nullptr, &plan),
            STRATA_INVALID_ARGUMENT);
  size_t count = 0;
  EXPECT_EQ(strata_pic_markers_from_separator(prompt.data(), prompt.size(), nullptr, 0, nullptr, 0,
                                              &count),
            STRATA_INVALID_ARGUMENT);
  EXPECT_EQ(strata_pic_verify(connector, "nobody"), STRATA_NOT_FOUND);
  EXPECT_EQ(strata_pic_publish(connector, "nobody", nullptr), STRATA_NOT_FOUND);
  EXPECT_EQ(strata_pic_refresh(connector, "nobody", nullptr), STRATA_NOT_FOUND);
  EXPECT_EQ(strata_pic_open_requests(connector), 0u);
  strata_pic_plan_info info;
  EXPECT_EQ(strata_pic_plan_info_get(nullptr, &info), STRATA_INVALID_ARGUMENT);
  strata_pic_connector_destroy(connector);
  strata_pic_connector_destroy(nullptr);
  strata_pic_plan_destroy(nullptr);
}

}  // namespace
