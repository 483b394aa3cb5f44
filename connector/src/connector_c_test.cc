#include "strata/connector_c.h"

#include <cstring>
#include <numeric>
#include <string>
#include <thread>
#include <vector>

#include "connector/src/testing/test_daemon.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

extern "C" int strata_c_header_check(void);

namespace {

using strata::connector::testing::TestDaemon;
using ::testing::HasSubstr;

constexpr uint32_t kLayers = 2;
constexpr int64_t kBlocks = 32;
constexpr int64_t kBlock = 4;
constexpr int64_t kHeads = 2;
constexpr int64_t kDim = 8;

// The options point into `socket_path`, which must outlive them.
strata_connector_options Options(const std::string& socket_path) {
  strata_connector_options options;
  strata_options_init(&options);
  options.socket_path = socket_path.c_str();
  options.engine_id = "c-test";
  options.model_id = "c-model";
  options.num_layers = kLayers;
  options.num_kv_heads = kHeads;
  options.head_dim = kDim;
  options.dtype = STRATA_DTYPE_FLOAT16;
  options.chunk_tokens = 16;
  options.block_size = kBlock;
  options.lookup_budget_ms = 1000;
  options.io_timeout_ms = 2000;
  options.device_backend = "host";
  return options;
}

TEST(ConnectorCTest, HeaderCompilesAsCAndInitGivesDefaults) {
  // No socket path: create fails with INVALID_ARGUMENT.
  EXPECT_EQ(strata_c_header_check(), STRATA_INVALID_ARGUMENT);
  strata_connector_options options;
  strata_options_init(&options);
  EXPECT_EQ(options.struct_size, sizeof(strata_connector_options));
  EXPECT_EQ(options.chunk_tokens, 256u);
  EXPECT_EQ(options.lookup_budget_ms, 20u);
  EXPECT_EQ(options.enable_load, 1);
  EXPECT_EQ(options.async_loads, 0);
  EXPECT_STREQ(options.hash_algorithm, "xxh3_128");
}

TEST(ConnectorCTest, CreateReportsBadOptions) {
  strata_scheduler* scheduler = reinterpret_cast<strata_scheduler*>(0x1);
  EXPECT_EQ(strata_scheduler_create(nullptr, &scheduler), STRATA_INVALID_ARGUMENT);
  EXPECT_EQ(scheduler, nullptr);
  EXPECT_THAT(strata_last_error(), HasSubstr("NULL"));
  EXPECT_EQ(strata_scheduler_create(nullptr, nullptr), STRATA_INVALID_ARGUMENT);

  const std::string path = "/tmp/strata-c-test.sock";
  strata_connector_options options = Options(path);
  options.struct_size = 8;
  EXPECT_EQ(strata_scheduler_create(&options, &scheduler), STRATA_INVALID_ARGUMENT);
  EXPECT_THAT(strata_last_error(), HasSubstr("struct_size"));

  const std::string empty;  // Options keeps the c_str() of its argument
  options = Options(empty);
  EXPECT_EQ(strata_scheduler_create(&options, &scheduler), STRATA_INVALID_ARGUMENT);
  EXPECT_THAT(strata_last_error(), HasSubstr("socket_path"));
  options = Options(path);
  options.dtype = 42;
  EXPECT_EQ(strata_scheduler_create(&options, &scheduler), STRATA_INVALID_ARGUMENT);
  EXPECT_THAT(strata_last_error(), HasSubstr("dtype"));
  options = Options(path);
  options.kv_kind = 257;  // not truncated to the C++ enum's uint8_t (1, MHA)
  EXPECT_EQ(strata_scheduler_create(&options, &scheduler), STRATA_INVALID_ARGUMENT);
  EXPECT_THAT(strata_last_error(), HasSubstr("options.kv_kind: unknown kind value 257"));
  options = Options(path);
  options.hash_algorithm = "md5";
  EXPECT_EQ(strata_scheduler_create(&options, &scheduler), STRATA_INVALID_ARGUMENT);
  options = Options(path);
  options.num_layers = 0;
  EXPECT_EQ(strata_scheduler_create(&options, &scheduler), STRATA_INVALID_ARGUMENT);
  EXPECT_THAT(strata_last_error(), HasSubstr("layout"));
  options = Options(path);
  options.device_backend = "tpu";
  strata_worker* worker = nullptr;
  EXPECT_EQ(strata_worker_create(&options, &worker), STRATA_INVALID_ARGUMENT);
  EXPECT_EQ(worker, nullptr);
  options = Options(path);
  EXPECT_EQ(strata_scheduler_create(&options, &scheduler), STRATA_OK) << strata_last_error();
  EXPECT_STREQ(strata_last_error(), "");
  strata_scheduler_destroy(scheduler);
  strata_scheduler_destroy(nullptr);
  strata_worker_destroy(nullptr);
  strata_metadata_destroy(nullptr);
}

TEST(ConnectorCTest, NullHandlesAndArraysAreInvalidArguments) {
  int64_t tokens = 0;
  EXPECT_EQ(strata_scheduler_get_num_new_matched_tokens(nullptr, "r", nullptr, 0, 0, nullptr,
                                                        nullptr, &tokens, nullptr),
            STRATA_INVALID_ARGUMENT);
  EXPECT_EQ(strata_scheduler_update_state_after_alloc(nullptr, "r", nullptr, 0, 0),
            STRATA_INVALID_ARGUMENT);
  strata_metadata* meta = nullptr;
  EXPECT_EQ(strata_scheduler_build_meta(nullptr, nullptr, 0, nullptr, 0, &meta),
            STRATA_INVALID_ARGUMENT);
  EXPECT_EQ(strata_worker_wait_for_layer_load(nullptr, 0), STRATA_INVALID_ARGUMENT);
  EXPECT_EQ(strata_worker_wait_for_save(nullptr), STRATA_INVALID_ARGUMENT);
  EXPECT_EQ(strata_worker_start_load_kv(nullptr, nullptr, 0, 0), STRATA_INVALID_ARGUMENT);
  size_t count = 0;
  EXPECT_EQ(strata_worker_get_block_ids_with_load_errors(nullptr, nullptr, 0, &count),
            STRATA_INVALID_ARGUMENT);
  EXPECT_EQ(strata_metadata_serialize(nullptr, nullptr, 0, &count), STRATA_INVALID_ARGUMENT);

  TestDaemon daemon;
  strata_connector_options options = Options(daemon.socket_path());
  strata_scheduler* scheduler = nullptr;
  ASSERT_EQ(strata_scheduler_create(&options, &scheduler), STRATA_OK);
  EXPECT_EQ(strata_scheduler_get_num_new_matched_tokens(scheduler, nullptr, nullptr, 0, 0, nullptr,
                                                        nullptr, &tokens, nullptr),
            STRATA_INVALID_ARGUMENT);
  EXPECT_EQ(strata_scheduler_get_num_new_matched_tokens(scheduler, "r", nullptr, 5, 0, nullptr,
                                                        nullptr, &tokens, nullptr),
            STRATA_INVALID_ARGUMENT);
  strata_scheduled_request request{};
  request.request_id = "r";
  request.kind = 7;
  EXPECT_EQ(strata_scheduler_build_meta(scheduler, &request, 1, nullptr, 0, &meta),
            STRATA_INVALID_ARGUMENT);
  EXPECT_THAT(strata_last_error(), HasSubstr("kind"));
  const char* finished[] = {nullptr};
  EXPECT_EQ(strata_scheduler_build_meta(scheduler, nullptr, 0, finished, 1, &meta),
            STRATA_INVALID_ARGUMENT);
  // A load nobody offered: an error, and the load comes back failed in the metadata.
  const int32_t blocks[] = {1, 2};
  EXPECT_EQ(strata_scheduler_update_state_after_alloc(scheduler, "ghost", blocks, 2, 8),
            STRATA_FAILED_PRECONDITION);
  ASSERT_EQ(strata_scheduler_build_meta(scheduler, nullptr, 0, nullptr, 0, &meta), STRATA_OK);
  size_t loads = 0, saves = 0;
  ASSERT_EQ(strata_metadata_counts(meta, &loads, &saves), STRATA_OK);
  EXPECT_EQ(loads, 1u);
  EXPECT_EQ(saves, 0u);
  strata_metadata_destroy(meta);
  strata_scheduler_destroy(scheduler);
}

TEST(ConnectorCTest, LastErrorIsPerThread) {
  EXPECT_EQ(strata_worker_wait_for_save(nullptr), STRATA_INVALID_ARGUMENT);
  std::string other;
  std::thread([&] { other = strata_last_error(); }).join();
  EXPECT_EQ(other, "");
  EXPECT_THAT(strata_last_error(), HasSubstr("worker"));
}

TEST(ConnectorCTest, MetadataSerializationAndBuffers) {
  EXPECT_EQ(strata_metadata_deserialize(reinterpret_cast<const uint8_t*>("junk"), 4, nullptr),
            STRATA_INVALID_ARGUMENT);
  strata_metadata* meta = nullptr;
  EXPECT_EQ(strata_metadata_deserialize(reinterpret_cast<const uint8_t*>("junk"), 4, &meta),
            STRATA_INVALID_ARGUMENT);
  EXPECT_EQ(meta, nullptr);
}

// One engine's scheduler and worker over paged KV of kLayers layers, driven through the C ABI
// only; every block of its KV starts as `fill`.
class CEngine {
 public:
  CEngine(const strata_connector_options& options, uint16_t fill) {
    EXPECT_EQ(strata_scheduler_create(&options, &scheduler_), STRATA_OK) << strata_last_error();
    EXPECT_EQ(strata_worker_create(&options, &worker_), STRATA_OK) << strata_last_error();
    std::vector<strata_layer_kv> layers(kLayers);
    for (uint32_t l = 0; l < kLayers; ++l) {
      kv_.emplace_back(2 * kPlane, fill);
      layers[l].kv = {kv_.back().data(), 5, kShape, kStrides};
      layers[l].v = nullptr;
    }
    EXPECT_EQ(strata_worker_register_kv_caches(worker_, layers.data(), kLayers), STRATA_OK)
        << strata_last_error();
  }
  ~CEngine() {
    strata_worker_destroy(worker_);
    strata_scheduler_destroy(scheduler_);
  }

  // One whole-prompt step of request `id` into `blocks`: lookup, load of what it offers, save.
  // Returns the matched tokens (-1 after a failed assertion).
  int64_t Step(const char* id, const std::vector<uint32_t>& prompt,
               const std::vector<int32_t>& blocks) {
    int64_t matched = -1;
    StepInto(id, prompt, blocks, &matched);
    return matched;
  }

  // Whether positions [0, num_tokens) of `blocks` hold `value` in every layer and plane.
  bool Holds(const std::vector<int32_t>& blocks, int64_t num_tokens, uint16_t value) const {
    for (uint32_t l = 0; l < kLayers; ++l) {
      for (int64_t p = 0; p < num_tokens; ++p) {
        for (int64_t plane_index = 0; plane_index < 2; ++plane_index) {
          const int64_t base =
              plane_index * kPlane + (blocks[p / kBlock] * kBlock + p % kBlock) * kHeads * kDim;
          for (int64_t e = 0; e < kHeads * kDim; ++e) {
            if (kv_[l][base + e] != value) return false;
          }
        }
      }
    }
    return true;
  }

  strata_scheduler* scheduler() const { return scheduler_; }
  strata_worker* worker() const { return worker_; }

 private:
  static constexpr int64_t kPlane = kBlocks * kBlock * kHeads * kDim;
  static constexpr int64_t kShape[] = {2, kBlocks, kBlock, kHeads, kDim};
  static constexpr int64_t kStrides[] = {kPlane, kBlock* kHeads* kDim, kHeads* kDim, kDim, 1};

  void StepInto(const char* id, const std::vector<uint32_t>& prompt,
                const std::vector<int32_t>& blocks, int64_t* matched) {
    const int64_t prompt_len = static_cast<int64_t>(prompt.size());
    ASSERT_EQ(
        strata_scheduler_get_num_new_matched_tokens(scheduler_, id, prompt.data(), prompt.size(), 0,
                                                    nullptr, nullptr, matched, nullptr),
        STRATA_OK);
    ASSERT_EQ(strata_scheduler_update_state_after_alloc(scheduler_, id, blocks.data(),
                                                        blocks.size(), *matched),
              STRATA_OK);
    strata_scheduled_request request{};
    request.request_id = id;
    request.kind = STRATA_SCHEDULED_NEW;
    request.num_computed_tokens = *matched;
    request.num_scheduled_tokens = prompt_len - *matched;
    request.block_ids = blocks.data();
    request.num_block_ids = blocks.size();
    strata_metadata* meta = nullptr;
    ASSERT_EQ(strata_scheduler_build_meta(scheduler_, &request, 1, nullptr, 0, &meta), STRATA_OK);
    // Through bytes, as between processes.
    size_t size = 0;
    ASSERT_EQ(strata_metadata_serialize(meta, nullptr, 0, &size), STRATA_OUT_OF_RANGE);
    std::vector<uint8_t> bytes(size);
    ASSERT_EQ(strata_metadata_serialize(meta, bytes.data(), bytes.size(), &size), STRATA_OK);
    strata_metadata_destroy(meta);
    ASSERT_EQ(strata_metadata_deserialize(bytes.data(), bytes.size(), &meta), STRATA_OK);
    ASSERT_EQ(strata_worker_start_load_kv(worker_, meta, 0, 0), STRATA_OK) << strata_last_error();
    for (uint32_t l = 0; l < kLayers; ++l) {
      ASSERT_EQ(strata_worker_wait_for_layer_load(worker_, l), STRATA_OK);
      ASSERT_EQ(strata_worker_save_kv_layer(worker_, l, 0, 0), STRATA_OK);
    }
    ASSERT_EQ(strata_worker_wait_for_save(worker_), STRATA_OK);
    strata_metadata_destroy(meta);
  }

  strata_scheduler* scheduler_ = nullptr;
  strata_worker* worker_ = nullptr;
  std::vector<std::vector<uint16_t>> kv_;
};

std::vector<uint32_t> Prompt(size_t len, uint32_t first) {
  std::vector<uint32_t> tokens(len);
  std::iota(tokens.begin(), tokens.end(), first);
  return tokens;
}

// A whole store-then-load through the C ABI only.
TEST(ConnectorCTest, StoreThenLoadThroughTheCAbi) {
  TestDaemon daemon;
  ASSERT_TRUE(daemon.Start().ok());
  const strata_connector_options options = Options(daemon.socket_path());
  const std::vector<uint32_t> prompt = Prompt(32, 500);
  std::vector<int32_t> blocks(8);
  std::iota(blocks.begin(), blocks.end(), 3);

  CEngine a(options, 0x1234);
  EXPECT_EQ(a.Step("a", prompt, blocks), 0);

  CEngine b(options, 0);
  EXPECT_EQ(b.Step("b", prompt, blocks), 31);
  // Positions 0..30 of every layer and plane came from A.
  EXPECT_TRUE(b.Holds(blocks, 31, 0x1234));
  size_t count = 99;
  EXPECT_EQ(strata_worker_get_block_ids_with_load_errors(b.worker(), nullptr, 0, &count),
            STRATA_OK);
  EXPECT_EQ(count, 0u);

  // A load that fails: the metadata claims chunks nobody stored.
  strata_metadata* meta = nullptr;
  const int32_t more_blocks[] = {20, 21, 22, 23};
  ASSERT_EQ(strata_scheduler_update_state_after_alloc(b.scheduler(), "nobody", more_blocks, 4, 16),
            STRATA_FAILED_PRECONDITION);
  ASSERT_EQ(strata_scheduler_build_meta(b.scheduler(), nullptr, 0, nullptr, 0, &meta), STRATA_OK);
  ASSERT_EQ(strata_worker_start_load_kv(b.worker(), meta, 0, 0), STRATA_OK);
  ASSERT_EQ(strata_worker_wait_for_save(b.worker()), STRATA_OK);
  strata_metadata_destroy(meta);
  int32_t two[2];
  EXPECT_EQ(strata_worker_get_block_ids_with_load_errors(b.worker(), two, 2, &count),
            STRATA_OUT_OF_RANGE);
  EXPECT_EQ(count, 4u);
  int32_t four[4];
  EXPECT_EQ(strata_worker_get_block_ids_with_load_errors(b.worker(), four, 4, &count), STRATA_OK);
  EXPECT_EQ(count, 4u);
  EXPECT_EQ(std::vector<int32_t>(four, four + 4), std::vector<int32_t>({20, 21, 22, 23}));
  EXPECT_EQ(strata_worker_get_block_ids_with_load_errors(b.worker(), four, 4, &count), STRATA_OK);
  EXPECT_EQ(count, 0u);

  // A bad tensor description.
  const int64_t strides[] = {1, 1, 1, 1, 1};
  strata_layer_kv bad{};
  bad.kv = {nullptr, 5, nullptr, strides};
  EXPECT_EQ(strata_worker_register_kv_caches(b.worker(), &bad, 1), STRATA_INVALID_ARGUMENT);
}

// A queued request's chunks that went to disk: the prefetch reports them queued, the daemon
// promotes them into its host tier, and the request's load then reads them from there.
TEST(ConnectorCTest, PrefetchPromotesDiskChunksThatTheLoadThenReads) {
  // Room for two chunks in the host tier (LRU): storing a second prompt of two chunks pushes the
  // first prompt's chunks to disk, and promoting them back pushes the second's.
  TestDaemon daemon({.capacity_bytes = 2 * 4096,
                     .policy = "lru",
                     .disk_capacity_bytes = 4ull << 20,
                     .disk_segment_bytes = 1ull << 20});
  ASSERT_TRUE(daemon.Start().ok());
  const strata_connector_options options = Options(daemon.socket_path());
  const std::vector<uint32_t> prompt = Prompt(32, 500);
  const std::vector<uint32_t> other = Prompt(32, 9000);
  std::vector<int32_t> blocks(8);
  std::iota(blocks.begin(), blocks.end(), 3);

  CEngine a(options, 0x1234);
  EXPECT_EQ(a.Step("a", prompt, blocks), 0);
  EXPECT_EQ(a.Step("a2", other, blocks), 0);
  ASSERT_EQ(daemon.store()->Stats().lower.at(0).chunks, 2u)
      << "the first prompt's chunks went to disk";

  CEngine b(options, 0);
  uint32_t queued = 99;
  ASSERT_EQ(strata_scheduler_prefetch(b.scheduler(), "b", prompt.data(), prompt.size(), nullptr,
                                      nullptr, &queued),
            STRATA_OK)
      << strata_last_error();
  EXPECT_EQ(queued, 2u);
  daemon.store()->Flush();
  EXPECT_EQ(daemon.store()->Stats().movement.prefetch_promoted, 2u);
  const uint64_t disk_reads = daemon.store()->Stats().lower.at(0).reads;

  // In the host tier now: nothing left to queue, and the load reads no disk.
  ASSERT_EQ(
      strata_scheduler_prefetch(b.scheduler(), "b", prompt.data(), prompt.size(), "", "", &queued),
      STRATA_OK);
  EXPECT_EQ(queued, 0u);
  EXPECT_EQ(b.Step("b", prompt, blocks), 31);
  EXPECT_TRUE(b.Holds(blocks, 31, 0x1234));
  EXPECT_EQ(daemon.store()->Stats().lower.at(0).reads, disk_reads);
}

// Asynchronous loads through the C ABI: a hit on the daemon's disk is offered asynchronously,
// the worker loads it in the background, and strata_worker_get_finished reports the request
// once its blocks hold the KV (ids that do not fit the buffer stay pending).
TEST(ConnectorCTest, AsynchronousLoadsAreReportedByGetFinished) {
  TestDaemon daemon({.capacity_bytes = 2 * 4096,
                     .policy = "lru",
                     .disk_capacity_bytes = 4ull << 20,
                     .disk_segment_bytes = 1ull << 20});
  ASSERT_TRUE(daemon.Start().ok());
  strata_connector_options options = Options(daemon.socket_path());
  const std::vector<uint32_t> prompt = Prompt(32, 500);
  std::vector<int32_t> blocks(8);
  std::iota(blocks.begin(), blocks.end(), 3);
  CEngine a(options, 0x1234);
  EXPECT_EQ(a.Step("a", prompt, blocks), 0);
  EXPECT_EQ(a.Step("a2", Prompt(32, 9000), blocks), 0);  // pushes the prompt's chunks to disk

  options.async_loads = 1;
  CEngine b(options, 0);
  int64_t matched = 0;
  int32_t load_async = 0;
  ASSERT_EQ(
      strata_scheduler_get_num_new_matched_tokens(b.scheduler(), "b", prompt.data(), prompt.size(),
                                                  0, nullptr, nullptr, &matched, &load_async),
      STRATA_OK);
  ASSERT_EQ(matched, 31);
  ASSERT_EQ(load_async, 1);
  ASSERT_EQ(strata_scheduler_update_state_after_alloc(b.scheduler(), "b", blocks.data(),
                                                      blocks.size(), matched),
            STRATA_OK);
  strata_metadata* meta = nullptr;
  ASSERT_EQ(strata_scheduler_build_meta(b.scheduler(), nullptr, 0, nullptr, 0, &meta), STRATA_OK);
  ASSERT_EQ(strata_worker_start_load_kv(b.worker(), meta, 0, 0), STRATA_OK);
  ASSERT_EQ(strata_worker_wait_for_save(b.worker()), STRATA_OK);
  strata_metadata_destroy(meta);

  // Empty steps until the worker reports the request (bounded: 10 s).
  size_t bytes = 0;
  size_t count = 0;
  strata_status status = STRATA_OK;
  for (int i = 0; i < 5000 && count == 0; ++i) {
    status = strata_worker_get_finished(b.worker(), nullptr, 0, nullptr, 0, &bytes, &count);
    if (count == 0) std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  ASSERT_EQ(count, 1u);
  EXPECT_EQ(status, STRATA_OUT_OF_RANGE) << "no room for the id: it stays pending";
  EXPECT_EQ(bytes, 2u);
  char ids[8];
  ASSERT_EQ(strata_worker_get_finished(b.worker(), nullptr, 0, ids, sizeof(ids), &bytes, &count),
            STRATA_OK);
  EXPECT_EQ((std::string(ids, bytes)), std::string("b", 2));
  EXPECT_TRUE(b.Holds(blocks, 31, 0x1234));
  EXPECT_EQ(strata_worker_get_block_ids_with_load_errors(b.worker(), nullptr, 0, &count),
            STRATA_OK);
  EXPECT_EQ(count, 0u);
  const char* finished[] = {"b"};
  ASSERT_EQ(strata_worker_get_finished(b.worker(), finished, 1, ids, sizeof(ids), &bytes, &count),
            STRATA_OK);
  EXPECT_EQ(count, 0u) << "reported once";
  EXPECT_EQ(strata_worker_get_finished(b.worker(), nullptr, 1, ids, sizeof(ids), &bytes, &count),
            STRATA_INVALID_ARGUMENT);
}

TEST(ConnectorCTest, PrefetchArgumentsAndUnknownRequests) {
  const std::vector<uint32_t> prompt = Prompt(32, 500);
  uint32_t queued = 99;
  EXPECT_EQ(strata_scheduler_prefetch(nullptr, "r", prompt.data(), prompt.size(), nullptr, nullptr,
                                      &queued),
            STRATA_INVALID_ARGUMENT);
  EXPECT_THAT(strata_last_error(), HasSubstr("scheduler"));

  TestDaemon daemon;  // no disk tier
  ASSERT_TRUE(daemon.Start().ok());
  const strata_connector_options options = Options(daemon.socket_path());
  strata_scheduler* scheduler = nullptr;
  ASSERT_EQ(strata_scheduler_create(&options, &scheduler), STRATA_OK);
  EXPECT_EQ(strata_scheduler_prefetch(scheduler, nullptr, prompt.data(), prompt.size(), nullptr,
                                      nullptr, &queued),
            STRATA_INVALID_ARGUMENT);
  EXPECT_THAT(strata_last_error(), HasSubstr("request_id"));
  EXPECT_EQ(strata_scheduler_prefetch(scheduler, "r", nullptr, 5, nullptr, nullptr, &queued),
            STRATA_INVALID_ARGUMENT);
  EXPECT_THAT(strata_last_error(), HasSubstr("prompt_tokens"));
  EXPECT_EQ(strata_scheduler_prefetch(scheduler, "r", prompt.data(), prompt.size(), nullptr,
                                      nullptr, nullptr),
            STRATA_INVALID_ARGUMENT);
  EXPECT_THAT(strata_last_error(), HasSubstr("out_num_chunks"));
  EXPECT_EQ(queued, 99u) << "a refused call leaves the output alone";

  // A request the scheduler never saw, a daemon without a disk tier, an empty prompt: a hint
  // nobody can take is OK with nothing queued, and it does not make the request known.
  EXPECT_EQ(strata_scheduler_prefetch(scheduler, "never-seen", prompt.data(), prompt.size(),
                                      nullptr, nullptr, &queued),
            STRATA_OK)
      << strata_last_error();
  EXPECT_EQ(queued, 0u);
  queued = 99;
  EXPECT_EQ(strata_scheduler_prefetch(scheduler, "empty", nullptr, 0, nullptr, nullptr, &queued),
            STRATA_OK);
  EXPECT_EQ(queued, 0u);
  const int32_t blocks[] = {1, 2};
  EXPECT_EQ(strata_scheduler_update_state_after_alloc(scheduler, "never-seen", blocks, 2, 8),
            STRATA_FAILED_PRECONDITION);
  strata_scheduler_destroy(scheduler);
}

}  // namespace
