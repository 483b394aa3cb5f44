// End-to-end tests of the connector against the daemon's real engine-session server (in-process,
// on a temp socket): a fake engine drives a SchedulerConnector and a WorkerConnector the way vLLM
// does, "computes" KV as a function of each position's token prefix, and checks byte for byte
// that what it loads is what another engine stored.
#include <algorithm>
#include <atomic>
#include <cstring>
#include <functional>
#include <numeric>
#include <random>
#include <thread>

#include "connector/src/testing/test_daemon.h"
#include "core/key_hasher.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "storage/codec/codec_registry.h"
#include "storage/device/host_runtime.h"
#include "strata/connector.h"

namespace strata::connector {
namespace {

using std::chrono::milliseconds;
using ::testing::ElementsAreArray;
using testing::TestDaemon;

constexpr uint32_t kLayers = 4;
constexpr uint32_t kHeads = 2;
constexpr uint32_t kDim = 8;
constexpr uint32_t kChunk = 16;
constexpr int64_t kBlock = 4;
constexpr int64_t kNumBlocks = 96;

KvLayout TestLayout() {
  KvLayout layout;
  layout.model_id = "worker-test";
  layout.num_layers = kLayers;
  layout.num_kv_heads = kHeads;
  layout.head_dim = kDim;
  layout.dtype = KvDtype::kBfloat16;
  layout.chunk_tokens = kChunk;
  return layout;
}

constexpr uint64_t kRowBytes = kHeads * kDim * 2;  // one token of one plane

std::vector<uint32_t> Prompt(size_t len, uint32_t first = 1000) {
  std::vector<uint32_t> tokens(len);
  std::iota(tokens.begin(), tokens.end(), first);
  return tokens;
}

// The KV a model computes for position p depends on tokens [0, p]: row bytes are a function of
// a hash of that prefix, the layer, the plane and the byte.
std::vector<uint64_t> PrefixHashes(const std::vector<uint32_t>& tokens) {
  std::vector<uint64_t> h(tokens.size());
  uint64_t acc = 0x9E3779B97F4A7C15ull;
  for (size_t i = 0; i < tokens.size(); ++i) {
    acc = (acc ^ tokens[i]) * 0x100000001B3ull + i;
    h[i] = acc;
  }
  return h;
}
std::byte ExpectedByte(uint64_t prefix_hash, uint32_t layer, uint32_t plane, uint64_t b) {
  uint64_t x = prefix_hash ^ (uint64_t{layer} << 40) ^ (uint64_t{plane} << 52) ^ (b * 0x9E37ull);
  x ^= x >> 29;
  x *= 0xBF58476D1CE4E5B9ull;
  x ^= x >> 32;
  return static_cast<std::byte>(x);
}

enum class Form { kStacked, kSeparate };

// A fake engine: paged KV in host memory, a block allocator, and the scheduler/worker loop.
class Engine {
 public:
  struct Hooks {
    // Runs after the scheduler built a step's metadata, before the worker sees it.
    std::function<void(const ConnectorMetadata&)> before_worker;
  };
  struct Run {
    int64_t matched = 0;
    std::vector<int32_t> blocks;
    std::vector<int32_t> failed_blocks;
    std::vector<std::string> failed_requests;  // FinishedRequests::failed_recving
    std::vector<ConnectorMetadata> steps;
  };

  Engine(const std::string& socket_path, std::function<void(ConnectorOptions&)> tweak = {},
         std::unique_ptr<storage::DeviceRuntime> runtime = nullptr, Form form = Form::kStacked,
         uint32_t seed = 1)
      : form_(form) {
    options_.socket_path = socket_path;
    options_.layout = TestLayout();
    options_.block_size = kBlock;
    options_.lookup_budget = milliseconds(1000);
    options_.io_timeout = milliseconds(2000);
    options_.device_backend = storage::DeviceBackend::kHost;
    if (tweak) tweak(options_);
    auto scheduler = SchedulerConnector::Create(options_);
    EXPECT_TRUE(scheduler.ok()) << scheduler.status();
    scheduler_ = std::move(*scheduler);
    if (runtime == nullptr) runtime = std::make_unique<storage::HostRuntime>();
    auto worker = WorkerConnector::Create(options_, std::move(runtime));
    EXPECT_TRUE(worker.ok()) << worker.status();
    worker_ = std::move(*worker);

    const int64_t plane_elems = kNumBlocks * kBlock * kHeads * kDim;
    buffers_.reserve(2 * kLayers);  // references into it stay valid
    std::vector<LayerKvCache> layers;
    for (uint32_t l = 0; l < kLayers; ++l) {
      LayerKvCache layer;
      if (form == Form::kStacked) {
        auto& buffer = buffers_.emplace_back(2 * plane_elems * 2, std::byte{0xEE});
        layer.kv = {buffer.data(),
                    {2, kNumBlocks, kBlock, kHeads, kDim},
                    {plane_elems, kBlock * kHeads * kDim, kHeads * kDim, kDim, 1}};
      } else {
        auto& k = buffers_.emplace_back(plane_elems * 2, std::byte{0xEE});
        auto& v = buffers_.emplace_back(plane_elems * 2, std::byte{0xEE});
        const std::vector<int64_t> shape = {kNumBlocks, kBlock, kHeads, kDim};
        const std::vector<int64_t> strides = {kBlock * kHeads * kDim, kHeads * kDim, kDim, 1};
        layer.kv = {k.data(), shape, strides};
        layer.v = KvTensor{v.data(), shape, strides};
      }
      layers.push_back(std::move(layer));
    }
    const absl::Status registered = worker_->RegisterKvCaches(layers);
    EXPECT_TRUE(registered.ok()) << registered;
    free_blocks_.resize(kNumBlocks);
    std::iota(free_blocks_.begin(), free_blocks_.end(), 0);
    std::shuffle(free_blocks_.begin(), free_blocks_.end(), std::mt19937(seed));
  }

  // Row of `plane` of `layer` for position `p` of a request with `blocks`.
  std::byte* Row(const std::vector<int32_t>& blocks, int64_t p, uint32_t layer, uint32_t plane) {
    const int64_t block = blocks[p / kBlock];
    const int64_t slot = p % kBlock;
    const int64_t offset = (block * kBlock + slot) * kRowBytes;
    if (form_ == Form::kStacked) {
      return buffers_[layer].data() + plane * kNumBlocks * kBlock * kRowBytes + offset;
    }
    return buffers_[2 * layer + plane].data() + offset;
  }

  void Compute(const std::vector<uint64_t>& hashes, const std::vector<int32_t>& blocks,
               int64_t begin, int64_t end, uint32_t layer) {
    for (int64_t p = begin; p < end; ++p) {
      for (uint32_t plane = 0; plane < 2; ++plane) {
        std::byte* row = Row(blocks, p, layer, plane);
        for (uint64_t b = 0; b < kRowBytes; ++b) row[b] = ExpectedByte(hashes[p], layer, plane, b);
      }
    }
  }

  // Positions of [begin, end) whose KV is not what the prefix computes (empty: all correct).
  std::vector<int64_t> WrongPositions(const std::vector<uint32_t>& tokens,
                                      const std::vector<int32_t>& blocks, int64_t begin,
                                      int64_t end, uint32_t only_layer = kLayers) {
    const auto hashes = PrefixHashes(tokens);
    std::vector<int64_t> wrong;
    for (int64_t p = begin; p < end; ++p) {
      bool ok = true;
      for (uint32_t layer = 0; layer < kLayers; ++layer) {
        if (only_layer != kLayers && layer != only_layer) continue;
        for (uint32_t plane = 0; plane < 2; ++plane) {
          const std::byte* row = Row(blocks, p, layer, plane);
          for (uint64_t b = 0; b < kRowBytes; ++b) {
            ok = ok && row[b] == ExpectedByte(hashes[p], layer, plane, b);
          }
        }
      }
      if (!ok) wrong.push_back(p);
    }
    return wrong;
  }

  // Runs a prompt through prefill the way vLLM does. `local` leading positions are the engine's
  // own prefix-cache hit (computed here, block aligned); at most `per_step` tokens per step.
  Run RunPrompt(const std::string& id, const std::vector<uint32_t>& tokens, int64_t local = 0,
                int64_t per_step = 1 << 30, Hooks hooks = {}) {
    Run run;
    const int64_t len = static_cast<int64_t>(tokens.size());
    const auto hashes = PrefixHashes(tokens);
    const int64_t num_blocks = (len + kBlock - 1) / kBlock;
    run.blocks.assign(free_blocks_.end() - num_blocks, free_blocks_.end());
    free_blocks_.resize(free_blocks_.size() - num_blocks);
    for (uint32_t l = 0; l < kLayers; ++l) Compute(hashes, run.blocks, 0, local, l);

    run.matched =
        scheduler_->GetNumNewMatchedTokens({.request_id = id, .prompt_tokens = tokens}, local)
            .num_tokens;
    EXPECT_TRUE(scheduler_->UpdateStateAfterAlloc(id, run.blocks, run.matched).ok());
    int64_t computed = local + run.matched;
    bool first = true;
    while (computed < len) {
      const int64_t scheduled = std::min(per_step, len - computed);
      ScheduledRequest request{.request_id = id,
                               .kind = first ? ScheduledKind::kNew : ScheduledKind::kRunning,
                               .num_computed_tokens = computed,
                               .num_scheduled_tokens = scheduled,
                               .block_ids = first ? run.blocks : std::vector<int32_t>{}};
      first = false;
      ConnectorMetadata meta = scheduler_->BuildConnectorMeta({.requests = {request}});
      // The metadata crosses a process boundary in vLLM.
      meta = *ConnectorMetadata::Deserialize(meta.Serialize());
      if (hooks.before_worker) hooks.before_worker(meta);
      run.steps.push_back(meta);
      EXPECT_TRUE(worker_->StartLoadKv(meta).ok());
      for (uint32_t l = 0; l < kLayers; ++l) {
        EXPECT_TRUE(worker_->WaitForLayerLoad(l).ok());
        Compute(hashes, run.blocks, computed, computed + scheduled, l);
        EXPECT_TRUE(worker_->SaveKvLayer(l).ok());
      }
      EXPECT_TRUE(worker_->WaitForSave().ok());
      const auto failed = worker_->GetBlockIdsWithLoadErrors();
      run.failed_blocks.insert(run.failed_blocks.end(), failed.begin(), failed.end());
      computed += scheduled;
    }
    scheduler_->RequestFinished(id, run.blocks);
    return run;
  }

  // An asynchronous load of `tokens`' hit into fresh blocks, as vLLM drives one: the load goes
  // out with a step that schedules nothing else, then empty steps run until GetFinished reports
  // the request (bounded). `before_load` runs before the step that sends the load.
  Run RunAsyncLoad(const std::string& id, const std::vector<uint32_t>& tokens,
                   std::function<void()> before_load = {}) {
    Run run;
    const int64_t num_blocks = (static_cast<int64_t>(tokens.size()) + kBlock - 1) / kBlock;
    run.blocks.assign(free_blocks_.end() - num_blocks, free_blocks_.end());
    free_blocks_.resize(free_blocks_.size() - num_blocks);
    const MatchResult match =
        scheduler_->GetNumNewMatchedTokens({.request_id = id, .prompt_tokens = tokens}, 0);
    run.matched = match.num_tokens;
    EXPECT_TRUE(match.load_async);
    EXPECT_TRUE(scheduler_->UpdateStateAfterAlloc(id, run.blocks, run.matched).ok());
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    int count = 0;  // steps
    bool reported = false;
    while (!reported && std::chrono::steady_clock::now() < deadline) {
      ConnectorMetadata meta = scheduler_->BuildConnectorMeta({});
      run.steps.push_back(meta);
      if (count++ == 0 && before_load) before_load();
      EXPECT_TRUE(worker_->StartLoadKv(meta).ok());
      EXPECT_TRUE(worker_->WaitForSave().ok());
      const FinishedRequests done = worker_->GetFinished({});
      EXPECT_TRUE(done.finished_sending.empty());
      for (const std::string& r : done.finished_recving) reported = reported || r == id;
      run.failed_requests.insert(run.failed_requests.end(), done.failed_recving.begin(),
                                 done.failed_recving.end());
      const auto failed = worker_->GetBlockIdsWithLoadErrors();
      run.failed_blocks.insert(run.failed_blocks.end(), failed.begin(), failed.end());
      if (!reported) std::this_thread::sleep_for(milliseconds(1));
    }
    EXPECT_TRUE(reported) << "the asynchronous load of " << id << " was never reported";
    scheduler_->RequestFinished(id, run.blocks);
    return run;
  }

  SchedulerConnector& scheduler() { return *scheduler_; }
  WorkerConnector& worker() { return *worker_; }
  const ConnectorOptions& options() const { return options_; }

 private:
  const Form form_;
  ConnectorOptions options_;
  // The engine's KV: declared before the worker, so it is freed after the worker, whose
  // asynchronous loads may still be copying into it until it is destroyed (as an engine frees
  // its caches only once its connector has shut down).
  std::vector<std::vector<std::byte>> buffers_;
  std::vector<int32_t> free_blocks_;
  std::unique_ptr<SchedulerConnector> scheduler_;
  std::unique_ptr<WorkerConnector> worker_;
};

std::vector<int32_t> BlocksOf(const std::vector<int32_t>& blocks, int64_t begin, int64_t end) {
  std::vector<int32_t> out(blocks.begin() + begin / kBlock,
                           blocks.begin() + (end + kBlock - 1) / kBlock);
  std::sort(out.begin(), out.end());
  return out;
}

class WorkerConnectorTest : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_TRUE(daemon_.Start().ok()); }
  TestDaemon daemon_;
};

TEST_F(WorkerConnectorTest, ColdStoreThenWarmLoadIsByteExact) {
  const auto prompt = Prompt(70);
  Engine a(daemon_.socket_path());
  const Engine::Run cold = a.RunPrompt("a1", prompt);
  EXPECT_EQ(cold.matched, 0);
  EXPECT_TRUE(cold.failed_blocks.empty());
  EXPECT_EQ(a.worker().Stats().chunks_saved, 4u);
  EXPECT_EQ(daemon_.tier()->Stats().chunks, 4u);

  Engine b(daemon_.socket_path(), {}, nullptr, Form::kStacked, /*seed=*/2);
  const Engine::Run warm = b.RunPrompt("b1", prompt);
  EXPECT_EQ(warm.matched, 64);
  EXPECT_TRUE(warm.failed_blocks.empty());
  // B computed only [64, 70): the rest arrived from A through the arena.
  EXPECT_THAT(b.WrongPositions(prompt, warm.blocks, 0, 70), ::testing::IsEmpty());
  EXPECT_EQ(b.worker().Stats().chunks_loaded, 4u);
  EXPECT_EQ(b.worker().Stats().bytes_loaded, 64 * TestLayout().bytes_per_token());
  EXPECT_EQ(b.worker().Stats().chunks_saved, 0u) << "everything was cached";
  EXPECT_EQ(daemon_.tier()->Stats().active_leases, 0u) << "leases released";
}

TEST_F(WorkerConnectorTest, LoadsAcrossEngineLayouts) {
  const auto prompt = Prompt(48, 7);
  Engine a(daemon_.socket_path(), {}, nullptr, Form::kSeparate);
  a.RunPrompt("a", prompt);
  Engine b(daemon_.socket_path(), {}, nullptr, Form::kStacked, 3);
  const Engine::Run warm = b.RunPrompt("b", prompt);
  EXPECT_EQ(warm.matched, 47);
  EXPECT_THAT(b.WrongPositions(prompt, warm.blocks, 0, 48), ::testing::IsEmpty());
}

TEST_F(WorkerConnectorTest, FullPromptHitLoadsAllButTheLastToken) {
  const auto prompt = Prompt(64);
  Engine a(daemon_.socket_path());
  a.RunPrompt("a", prompt);
  Engine b(daemon_.socket_path(), {}, nullptr, Form::kStacked, 5);
  const Engine::Run warm = b.RunPrompt("b", prompt);
  EXPECT_EQ(warm.matched, 63);
  EXPECT_TRUE(warm.failed_blocks.empty());
  EXPECT_THAT(b.WrongPositions(prompt, warm.blocks, 0, 64), ::testing::IsEmpty());
}

TEST_F(WorkerConnectorTest, PartialPrefixHitThenSavesTheNewChunks) {
  const auto prompt = Prompt(64);
  Engine a(daemon_.socket_path());
  a.RunPrompt("a", prompt);
  auto other = prompt;
  other[40] = 7;  // diverges inside chunk 2
  Engine b(daemon_.socket_path(), {}, nullptr, Form::kStacked, 6);
  const Engine::Run run = b.RunPrompt("b", other);
  EXPECT_EQ(run.matched, 32);
  EXPECT_THAT(b.WrongPositions(other, run.blocks, 0, 64), ::testing::IsEmpty());
  EXPECT_EQ(b.worker().Stats().chunks_saved, 2u);
  EXPECT_EQ(daemon_.tier()->Stats().chunks, 6u);
  // A third engine finds the divergent branch whole.
  Engine c(daemon_.socket_path(), {}, nullptr, Form::kSeparate, 7);
  const Engine::Run again = c.RunPrompt("c", other);
  EXPECT_EQ(again.matched, 63);
  EXPECT_THAT(c.WrongPositions(other, again.blocks, 0, 64), ::testing::IsEmpty());
}

TEST_F(WorkerConnectorTest, ChunkedPrefillSavesAsChunksCompleteAndLocalHitsAreSkipped) {
  const auto prompt = Prompt(70, 300);
  Engine a(daemon_.socket_path());
  const Engine::Run cold = a.RunPrompt("a", prompt, 0, /*per_step=*/20);
  ASSERT_EQ(cold.steps.size(), 4u);
  EXPECT_EQ(cold.steps[0].saves.size(), 1u);  // 20 tokens: chunk 0
  EXPECT_EQ(cold.steps[1].saves.size(), 1u);  // 40: chunk 1
  EXPECT_EQ(cold.steps[2].saves.size(), 1u);  // 60: chunks 2
  EXPECT_EQ(cold.steps[3].saves.size(), 1u);  // 70: chunk 3
  EXPECT_EQ(a.worker().Stats().chunks_saved, 4u);

  Engine b(daemon_.socket_path(), {}, nullptr, Form::kStacked, 8);
  const Engine::Run warm = b.RunPrompt("b", prompt, /*local=*/16);
  EXPECT_EQ(warm.matched, 48);
  ASSERT_FALSE(warm.steps.empty());
  ASSERT_EQ(warm.steps[0].loads.size(), 1u);
  EXPECT_EQ(warm.steps[0].loads[0].token_begin, 16);
  EXPECT_THAT(b.WrongPositions(prompt, warm.blocks, 0, 70), ::testing::IsEmpty());
  EXPECT_EQ(b.worker().Stats().chunks_loaded, 3u);
}

TEST_F(WorkerConnectorTest, PartialChunksWhenAskedFor) {
  auto partial = [](ConnectorOptions& o) { o.store_partial_chunks = true; };
  const auto prompt = Prompt(70, 50);
  Engine a(daemon_.socket_path(), partial);
  a.RunPrompt("a", prompt);
  EXPECT_EQ(a.worker().Stats().chunks_saved, 5u);
  Engine b(daemon_.socket_path(), partial, nullptr, Form::kSeparate, 9);
  const Engine::Run warm = b.RunPrompt("b", prompt);
  EXPECT_EQ(warm.matched, 69);
  EXPECT_TRUE(warm.failed_blocks.empty());
  EXPECT_THAT(b.WrongPositions(prompt, warm.blocks, 0, 70), ::testing::IsEmpty());
}

TEST_F(WorkerConnectorTest, AChunkGoneBeforeTheLoadFailsItAndEveryLaterChunk) {
  const auto prompt = Prompt(64);
  Engine a(daemon_.socket_path());
  a.RunPrompt("a", prompt);
  const auto keys = KeyHasher::Create(TestLayout(), {})->PrefixKeys(prompt, {});
  Engine b(daemon_.socket_path(), {}, nullptr, Form::kStacked, 10);
  const Engine::Run run =
      b.RunPrompt("b", prompt, 0, 1 << 30, {.before_worker = [&](const ConnectorMetadata&) {
                    ASSERT_TRUE(daemon_.tier()->Remove(keys[2]).ok());
                  }});
  EXPECT_EQ(run.matched, 63);
  EXPECT_THAT(run.failed_blocks, ElementsAreArray(BlocksOf(run.blocks, 32, 63)));
  EXPECT_THAT(b.WrongPositions(prompt, run.blocks, 0, 32), ::testing::IsEmpty());
  EXPECT_EQ(b.worker().Stats().chunks_loaded, 2u);
  EXPECT_EQ(daemon_.tier()->Stats().active_leases, 0u);
}

TEST_F(WorkerConnectorTest, ALeaseThatExpiredDuringTheCopyFailsTheLoad) {
  ManualClock tier_clock;
  TestDaemon daemon({.clock = &tier_clock});
  ASSERT_TRUE(daemon.Start().ok());
  const auto prompt = Prompt(48);
  Engine a(daemon.socket_path());
  a.RunPrompt("a", prompt);
  // The copy takes "a minute": longer than the 30 s lease.
  std::atomic<bool> stalled{false};
  auto runtime = std::make_unique<storage::HostRuntime>(
      storage::HostRuntimeOptions{.copy_hook = [&](const storage::CopyRun&) {
        if (!stalled.exchange(true)) tier_clock.Advance(std::chrono::seconds(60));
        return absl::OkStatus();
      }});
  Engine b(daemon.socket_path(), {}, std::move(runtime), Form::kStacked, 11);
  const Engine::Run run = b.RunPrompt("b", prompt);
  EXPECT_EQ(run.matched, 47);
  EXPECT_TRUE(stalled.load());
  EXPECT_THAT(run.failed_blocks, ElementsAreArray(BlocksOf(run.blocks, 0, 47)));
  EXPECT_EQ(b.worker().Stats().chunks_loaded, 0u);
  EXPECT_EQ(b.worker().Stats().chunks_failed, 3u);
}

TEST_F(WorkerConnectorTest, ChecksumVerificationCatchesBytesChangedUnderTheCopy) {
  const auto prompt = Prompt(48);
  Engine a(daemon_.socket_path());
  a.RunPrompt("a", prompt);
  std::atomic<int> copies{0};
  auto runtime = std::make_unique<storage::HostRuntime>(
      storage::HostRuntimeOptions{.copy_hook = [&](const storage::CopyRun& run) {
        // The first run of the load reads chunk 0's layer 0 from the arena: change a byte there.
        if (copies++ == 0) {
          auto* src = const_cast<std::byte*>(static_cast<const std::byte*>(run.src));
          src[5] ^= std::byte{0x5a};
        }
        return absl::OkStatus();
      }});
  Engine b(
      daemon_.socket_path(), [](ConnectorOptions& o) { o.verify_checksums = true; },
      std::move(runtime), Form::kStacked, 12);
  const Engine::Run run = b.RunPrompt("b", prompt);
  EXPECT_EQ(run.matched, 47);
  EXPECT_THAT(run.failed_blocks, ElementsAreArray(BlocksOf(run.blocks, 0, 47)))
      << "chunk 0 failed, so every later chunk of the prefix is recomputed too";
  EXPECT_EQ(b.worker().Stats().chunks_corrupt, 1u);
}

// Compressed chunks. The plain chunk `index` of `tokens` holds (what engines stored), and
// what `codec` decodes its frame to (what a load of it compressed must give, byte for byte).
std::vector<std::byte> PlainChunk(const std::vector<uint32_t>& tokens, uint32_t index) {
  const KvLayout layout = TestLayout();
  const auto hashes = PrefixHashes(tokens);
  std::vector<std::byte> payload(layout.chunk_bytes(kChunk));
  for (uint32_t l = 0; l < kLayers; ++l) {
    for (uint32_t plane = 0; plane < 2; ++plane) {
      std::byte* rows = payload.data() + layout.plane_offset(l, plane, kChunk);
      for (uint32_t t = 0; t < kChunk; ++t) {
        for (uint64_t b = 0; b < kRowBytes; ++b) {
          rows[t * kRowBytes + b] = ExpectedByte(hashes[index * kChunk + t], l, plane, b);
        }
      }
    }
  }
  return payload;
}
std::vector<std::byte> DecodedChunk(const storage::Codec& codec, std::span<const std::byte> plain) {
  const KvLayout layout = TestLayout();
  std::vector<std::byte> decoded(plain.size());
  EXPECT_TRUE(codec.Decode(layout, *codec.Encode(layout, kChunk, plain, {}), decoded).ok());
  return decoded;
}

// Positions of [0, end) whose rows in `engine` differ from `chunks` (chunk p / kChunk's row).
std::vector<int64_t> PositionsUnlike(Engine& engine, const std::vector<int32_t>& blocks,
                                     int64_t end,
                                     const std::vector<std::vector<std::byte>>& chunks) {
  const KvLayout layout = TestLayout();
  std::vector<int64_t> unlike;
  for (int64_t p = 0; p < end; ++p) {
    const std::vector<std::byte>& chunk = chunks[p / kChunk];
    bool same = true;
    for (uint32_t l = 0; l < kLayers; ++l) {
      for (uint32_t plane = 0; plane < 2; ++plane) {
        const std::byte* want =
            chunk.data() + layout.plane_offset(l, plane, kChunk) + (p % kChunk) * kRowBytes;
        same = same && std::memcmp(engine.Row(blocks, p, l, plane), want, kRowBytes) == 0;
      }
    }
    if (!same) unlike.push_back(p);
  }
  return unlike;
}

// The daemon compresses every chunk of its host tier with `codec`.
void CompressHostChunks(TestDaemon& daemon, std::string_view codec, size_t expected) {
  std::vector<ChunkKey> keys;
  for (const storage::ChunkInfo& info : daemon.tier()->ListChunks({}).chunks) {
    keys.push_back(info.key);
  }
  auto totals = daemon.store()->Recode(keys, storage::Tier::kHost,
                                       {.codec = *storage::CodecRegistry::Find(codec)});
  ASSERT_TRUE(totals.ok()) << totals.status();
  ASSERT_EQ(totals->recoded, expected);
}

TEST_F(WorkerConnectorTest, CompressedChunksAreDecodedOnTheWorkersRuntimeAndStayCompressed) {
  const auto prompt = Prompt(48);
  Engine a(daemon_.socket_path());
  a.RunPrompt("a", prompt);
  CompressHostChunks(daemon_, "int8", 3);
  const storage::Codec& int8 = **storage::CodecRegistry::Find("int8");
  std::vector<std::vector<std::byte>> decoded;
  for (uint32_t c = 0; c < 3; ++c) decoded.push_back(DecodedChunk(int8, PlainChunk(prompt, c)));

  // Decoded here: the layers the engine reads are the codec's decode, and the daemon keeps the
  // chunks compressed.
  Engine b(daemon_.socket_path(), {}, nullptr, Form::kSeparate, 21);
  const Engine::Run run = b.RunPrompt("b", prompt);
  EXPECT_EQ(run.matched, 47);
  EXPECT_TRUE(run.failed_blocks.empty());
  EXPECT_THAT(PositionsUnlike(b, run.blocks, 47, decoded), ::testing::IsEmpty());
  EXPECT_FALSE(
      PositionsUnlike(b, run.blocks, 47,
                      {PlainChunk(prompt, 0), PlainChunk(prompt, 1), PlainChunk(prompt, 2)})
          .empty())
      << "int8 is lossy: a decode equal to the plain chunks would mean no decode ran";
  const WorkerStats stats = b.worker().Stats();
  EXPECT_EQ(stats.chunks_loaded, 3u);
  EXPECT_EQ(stats.chunks_decoded, 3u);
  EXPECT_GT(stats.encoded_bytes_loaded, 0u);
  EXPECT_LT(stats.encoded_bytes_loaded, 3 * TestLayout().chunk_bytes(kChunk));
  EXPECT_EQ(stats.chunks_corrupt, 0u);
  EXPECT_EQ(daemon_.store()->Stats().movement.load_encoded, 3u);
  EXPECT_EQ(daemon_.store()->Stats().movement.load_decoded, 0u);
  EXPECT_EQ(daemon_.tier()->Stats().encoded_chunks, 3u);

  // A worker that does not decode gets the same bytes, decoded by the daemon in place.
  Engine c(
      daemon_.socket_path(), [](ConnectorOptions& o) { o.decode_on_device = false; }, nullptr,
      Form::kStacked, 22);
  const Engine::Run plain_run = c.RunPrompt("c", prompt);
  EXPECT_EQ(plain_run.matched, 47);
  EXPECT_TRUE(plain_run.failed_blocks.empty());
  EXPECT_THAT(PositionsUnlike(c, plain_run.blocks, 47, decoded), ::testing::IsEmpty());
  EXPECT_EQ(c.worker().Stats().chunks_decoded, 0u);
  EXPECT_EQ(daemon_.store()->Stats().movement.load_decoded, 3u);
  EXPECT_EQ(daemon_.tier()->Stats().encoded_chunks, 0u);
}

TEST_F(WorkerConnectorTest, ACompressedChunkThatDoesNotDecodeFailsItsBlocks) {
  // Neither the daemon nor the connector checks the frame's checksum: the decode must catch it.
  TestDaemon daemon({.verify_every_n_loads = 1u << 30});
  ASSERT_TRUE(daemon.Start().ok());
  const auto prompt = Prompt(48);
  Engine a(daemon.socket_path());
  a.RunPrompt("a", prompt);
  CompressHostChunks(daemon, "int8", 3);
  // A first load: the daemon verifies a chunk on its first lease only.
  EXPECT_TRUE(a.RunPrompt("a2", prompt).failed_blocks.empty());
  const std::vector<ChunkKey> keys =
      KeyHasher::Create(TestLayout(), {})->PrefixKeys(prompt, {}, PartialChunk::kInclude);
  {
    auto lease = daemon.tier()->AcquireForCopy(keys[1], std::nullopt, storage::Forms::kAny);
    ASSERT_TRUE(lease.ok() && lease->has_value());
    ASSERT_TRUE((*lease)->encoding().encoded());
    const storage::ArenaRange& range = (*lease)->ranges().back();
    daemon.tier()->arena_base()[range.offset + range.size_bytes - 3] ^= std::byte{0x21};
  }
  Engine b(
      daemon.socket_path(), [](ConnectorOptions& o) { o.verify_checksums = false; }, nullptr,
      Form::kStacked, 23);
  const Engine::Run run = b.RunPrompt("b", prompt);
  EXPECT_EQ(run.matched, 47);
  // Chunk 0 loads; chunk 1 and every chunk after it are recomputed.
  EXPECT_THAT(run.failed_blocks, ElementsAreArray(BlocksOf(run.blocks, kChunk, 47)));
  EXPECT_THAT(PositionsUnlike(
                  b, run.blocks, kChunk,
                  {DecodedChunk(**storage::CodecRegistry::Find("int8"), PlainChunk(prompt, 0))}),
              ::testing::IsEmpty());
  EXPECT_EQ(b.worker().Stats().chunks_corrupt, 1u);
  EXPECT_EQ(b.worker().Stats().chunks_loaded, 1u);
}

TEST_F(WorkerConnectorTest, FailedCopiesFailTheLoad) {
  const auto prompt = Prompt(32);
  Engine a(daemon_.socket_path());
  a.RunPrompt("a", prompt);
  auto runtime = std::make_unique<storage::HostRuntime>(storage::HostRuntimeOptions{
      .copy_hook = [](const storage::CopyRun&) { return absl::InternalError("injected"); }});
  Engine b(daemon_.socket_path(), {}, std::move(runtime), Form::kStacked, 13);
  const Engine::Run run = b.RunPrompt("b", prompt);
  EXPECT_EQ(run.matched, 31);
  EXPECT_THAT(run.failed_blocks, ElementsAreArray(BlocksOf(run.blocks, 0, 31)));
}

TEST_F(WorkerConnectorTest, TheEngineKeepsServingWhileTheDaemonIsGoneAndReconnects) {
  ManualClock clock;
  const auto prompt = Prompt(64);
  Engine a(daemon_.socket_path());
  a.RunPrompt("a", prompt);
  Engine b(
      daemon_.socket_path(), [&](ConnectorOptions& o) { o.clock = &clock; }, nullptr,
      Form::kStacked, 14);
  // The daemon dies between the lookup and the load.
  const Engine::Run run =
      b.RunPrompt("b1", prompt, 0, 1 << 30,
                  {.before_worker = [&](const ConnectorMetadata&) { daemon_.Stop(); }});
  EXPECT_EQ(run.matched, 63);
  EXPECT_THAT(run.failed_blocks, ElementsAreArray(BlocksOf(run.blocks, 0, 63)));
  EXPECT_FALSE(b.worker().Stats().connected);
  // Still gone: no hits, nothing fails, nothing is saved, and the engine computes everything.
  const Engine::Run alone = b.RunPrompt("b2", Prompt(40, 9));
  EXPECT_EQ(alone.matched, 0);
  EXPECT_TRUE(alone.failed_blocks.empty());
  EXPECT_THAT(b.WrongPositions(Prompt(40, 9), alone.blocks, 0, 40), ::testing::IsEmpty());
  // Back (with its chunks): after the backoff both sides reconnect by themselves.
  ASSERT_TRUE(daemon_.Start(/*keep_tier=*/true).ok());
  clock.Advance(milliseconds(1000));
  const Engine::Run back = b.RunPrompt("b3", prompt);
  EXPECT_EQ(back.matched, 63);
  EXPECT_TRUE(back.failed_blocks.empty());
  EXPECT_THAT(b.WrongPositions(prompt, back.blocks, 0, 64), ::testing::IsEmpty());
  EXPECT_TRUE(b.worker().Stats().connected);
}

TEST_F(WorkerConnectorTest, LayerLoadsArePipelined) {
  const auto prompt = Prompt(64);
  Engine a(daemon_.socket_path());
  a.RunPrompt("a", prompt);
  auto runtime = std::make_unique<storage::HostRuntime>(
      storage::HostRuntimeOptions{.copy_hook = [](const storage::CopyRun&) {
        std::this_thread::sleep_for(milliseconds(15));
        return absl::OkStatus();
      }});
  Engine b(daemon_.socket_path(), {}, std::move(runtime), Form::kStacked, 15);
  // Drive one step by hand to look between the layers.
  const MatchResult match =
      b.scheduler().GetNumNewMatchedTokens({.request_id = "p", .prompt_tokens = prompt}, 0);
  ASSERT_EQ(match.num_tokens, 63);
  std::vector<int32_t> blocks(16);
  std::iota(blocks.begin(), blocks.end(), 40);  // consecutive: one run per plane and layer
  ASSERT_TRUE(b.scheduler().UpdateStateAfterAlloc("p", blocks, 63).ok());
  const ConnectorMetadata meta =
      b.scheduler().BuildConnectorMeta({.requests = {{.request_id = "p",
                                                      .kind = ScheduledKind::kNew,
                                                      .num_computed_tokens = 63,
                                                      .num_scheduled_tokens = 1,
                                                      .block_ids = blocks}}});
  const auto start = std::chrono::steady_clock::now();
  ASSERT_TRUE(b.worker().StartLoadKv(meta).ok());
  EXPECT_LT(std::chrono::steady_clock::now() - start, milliseconds(15))
      << "StartLoadKv enqueues; it does not copy";
  ASSERT_TRUE(b.worker().WaitForLayerLoad(0).ok());
  EXPECT_THAT(b.WrongPositions(prompt, blocks, 0, 63, /*only_layer=*/0), ::testing::IsEmpty());
  EXPECT_FALSE(b.WrongPositions(prompt, blocks, 0, 63, /*only_layer=*/kLayers - 1).empty())
      << "the last layer is still being copied while layer 0 is consumed";
  for (uint32_t l = 1; l < kLayers; ++l) ASSERT_TRUE(b.worker().WaitForLayerLoad(l).ok());
  EXPECT_THAT(b.WrongPositions(prompt, blocks, 0, 63), ::testing::IsEmpty());
  ASSERT_TRUE(b.worker().WaitForSave().ok());
  EXPECT_TRUE(b.worker().GetBlockIdsWithLoadErrors().empty());
}

TEST_F(WorkerConnectorTest, SavesWithoutSaveKvLayerCallsHappenInWaitForSave) {
  const auto prompt = Prompt(32, 77);
  Engine a(daemon_.socket_path());
  ASSERT_EQ(a.scheduler()
                .GetNumNewMatchedTokens({.request_id = "w", .prompt_tokens = prompt}, 0)
                .num_tokens,
            0);
  std::vector<int32_t> blocks = {3, 9, 1, 20, 5, 6, 7, 8};
  ASSERT_TRUE(a.scheduler().UpdateStateAfterAlloc("w", blocks, 0).ok());
  const ConnectorMetadata meta =
      a.scheduler().BuildConnectorMeta({.requests = {{.request_id = "w",
                                                      .kind = ScheduledKind::kNew,
                                                      .num_computed_tokens = 0,
                                                      .num_scheduled_tokens = 32,
                                                      .block_ids = blocks}}});
  ASSERT_EQ(meta.saves.size(), 1u);
  const auto hashes = PrefixHashes(prompt);
  ASSERT_TRUE(a.worker().StartLoadKv(meta).ok());
  for (uint32_t l = 0; l < kLayers; ++l) a.Compute(hashes, blocks, 0, 32, l);
  ASSERT_TRUE(a.worker().WaitForSave().ok());
  EXPECT_EQ(a.worker().Stats().chunks_saved, 2u);
  Engine b(daemon_.socket_path(), {}, nullptr, Form::kSeparate, 16);
  const Engine::Run warm = b.RunPrompt("x", prompt);
  EXPECT_EQ(warm.matched, 31);
  EXPECT_THAT(b.WrongPositions(prompt, warm.blocks, 0, 32), ::testing::IsEmpty());
}

// Saves digest what they write and commit with those checksums, which follow payload order only
// when layers are saved in order; an engine that saves them out of order leaves the checksums to
// the daemon. Either way the next engine's checked load is whole and exact.
TEST_F(WorkerConnectorTest, LayersSavedOutOfOrderStillLoadVerified) {
  const auto prompt = Prompt(32, 91);
  Engine a(daemon_.socket_path());
  ASSERT_EQ(a.scheduler()
                .GetNumNewMatchedTokens({.request_id = "r", .prompt_tokens = prompt}, 0)
                .num_tokens,
            0);
  std::vector<int32_t> blocks = {4, 2, 11, 7, 5, 6, 0, 8};
  ASSERT_TRUE(a.scheduler().UpdateStateAfterAlloc("r", blocks, 0).ok());
  const ConnectorMetadata meta =
      a.scheduler().BuildConnectorMeta({.requests = {{.request_id = "r",
                                                      .kind = ScheduledKind::kNew,
                                                      .num_computed_tokens = 0,
                                                      .num_scheduled_tokens = 32,
                                                      .block_ids = blocks}}});
  const auto hashes = PrefixHashes(prompt);
  ASSERT_TRUE(a.worker().StartLoadKv(meta).ok());
  for (uint32_t l = 0; l < kLayers; ++l) a.Compute(hashes, blocks, 0, 32, l);
  for (uint32_t l = kLayers; l-- > 0;) ASSERT_TRUE(a.worker().SaveKvLayer(l).ok());
  ASSERT_TRUE(a.worker().WaitForSave().ok());
  EXPECT_EQ(a.worker().Stats().chunks_saved, 2u);

  Engine b(daemon_.socket_path());
  const Engine::Run warm = b.RunPrompt("x", prompt);
  EXPECT_EQ(warm.matched, 31);
  EXPECT_THAT(warm.failed_blocks, ::testing::IsEmpty());
  EXPECT_EQ(b.worker().Stats().chunks_corrupt, 0u);
  EXPECT_THAT(b.WrongPositions(prompt, warm.blocks, 0, 32), ::testing::IsEmpty());
}

TEST_F(WorkerConnectorTest, MisuseIsRejectedAndLoadsAreReportedFailed) {
  ConnectorOptions options;
  options.socket_path = daemon_.socket_path();
  options.layout = TestLayout();
  options.block_size = kBlock;
  auto worker = *WorkerConnector::Create(options, std::make_unique<storage::HostRuntime>());
  TransferSpec load{.request_id = "r",
                    .tokens = Prompt(32),
                    .token_begin = 0,
                    .token_end = 31,
                    .block_ids = {4, 5, 6, 7, 8, 9, 10, 11}};
  ConnectorMetadata meta{.block_size = kBlock, .chunk_tokens = kChunk, .loads = {load}};
  EXPECT_EQ(worker->StartLoadKv(meta).code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(worker->GetBlockIdsWithLoadErrors(), ElementsAreArray({4, 5, 6, 7, 8, 9, 10, 11}));
  EXPECT_TRUE(worker->GetBlockIdsWithLoadErrors().empty()) << "reported once";
  EXPECT_EQ(worker->WaitForLayerLoad(kLayers).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(worker->SaveKvLayer(kLayers).code(), absl::StatusCode::kInvalidArgument);

  // Caches of another block size.
  std::vector<std::byte> buffer(2 * 8 * 8 * kRowBytes);
  std::vector<LayerKvCache> layers(kLayers);
  for (auto& layer : layers) {
    layer.kv = {buffer.data(),
                {2, 8, 8, kHeads, kDim},
                {8 * 8 * kHeads * kDim, 8 * kHeads * kDim, kHeads * kDim, kDim, 1}};
  }
  EXPECT_EQ(worker->RegisterKvCaches(layers).code(), absl::StatusCode::kInvalidArgument);
  // Metadata of another geometry.
  Engine engine(daemon_.socket_path());
  ConnectorMetadata other = meta;
  other.block_size = 8;
  EXPECT_EQ(engine.worker().StartLoadKv(other).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(engine.worker().GetBlockIdsWithLoadErrors(),
              ElementsAreArray({4, 5, 6, 7, 8, 9, 10, 11}));
  // A load the scheduler marked failed.
  ConnectorMetadata failed = meta;
  failed.loads[0].fail = true;
  EXPECT_TRUE(engine.worker().StartLoadKv(failed).ok());
  ASSERT_TRUE(engine.worker().WaitForSave().ok());
  EXPECT_THAT(engine.worker().GetBlockIdsWithLoadErrors(),
              ElementsAreArray({4, 5, 6, 7, 8, 9, 10, 11}));
}

// Asynchronous loads (ConnectorOptions::async_loads) over a daemon whose host tier holds four
// chunks, above a disk tier.
class WorkerConnectorAsyncTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(daemon_.Start().ok());
    Engine a(daemon_.socket_path());
    a.RunPrompt("a", prompt_);
    a.RunPrompt("a2", Prompt(64, 50000));  // pushes the prompt's chunks to disk
    daemon_.store()->Flush();
  }
  static void Async(ConnectorOptions& o) { o.async_loads = true; }

  TestDaemon daemon_{{.capacity_bytes = 4 * 4096,
                      .policy = "lru",
                      .disk_capacity_bytes = 4ull << 20,
                      .disk_segment_bytes = 1ull << 20}};
  const std::vector<uint32_t> prompt_ = Prompt(64);
};

TEST_F(WorkerConnectorAsyncTest, ADiskHitLoadsBetweenStepsByteExact) {
  Engine b(daemon_.socket_path(), Async, nullptr, Form::kStacked, 4);
  const Engine::Run run = b.RunAsyncLoad("b", prompt_);
  EXPECT_EQ(run.matched, 63);
  EXPECT_TRUE(run.failed_blocks.empty());
  EXPECT_TRUE(run.failed_requests.empty());
  EXPECT_THAT(b.WrongPositions(prompt_, run.blocks, 0, 63), ::testing::IsEmpty());
  ASSERT_FALSE(run.steps.empty());
  ASSERT_EQ(run.steps[0].loads.size(), 1u);
  EXPECT_TRUE(run.steps[0].loads[0].async);
  const WorkerStats stats = b.worker().Stats();
  EXPECT_EQ(stats.chunks_loaded, 4u);
  EXPECT_EQ(stats.async_requests_loaded, 1u);
  EXPECT_EQ(stats.async_requests_in_flight, 0u);
  EXPECT_EQ(daemon_.tier()->Stats().active_leases, 0u) << "leases released";
  // Back in the host tier: the next hit of the prompt is synchronous.
  EXPECT_FALSE(b.scheduler()
                   .GetNumNewMatchedTokens({.request_id = "c", .prompt_tokens = prompt_}, 0)
                   .load_async);
}

TEST_F(WorkerConnectorAsyncTest, TheDaemonGoneBeforeTheLoadFailsEveryBlockAndStillReports) {
  Engine b(daemon_.socket_path(), Async, nullptr, Form::kStacked, 5);
  const Engine::Run run = b.RunAsyncLoad("b", prompt_, [&] { daemon_.Stop(); });
  EXPECT_EQ(run.matched, 63);
  std::vector<int32_t> failed = run.failed_blocks;
  std::sort(failed.begin(), failed.end());
  EXPECT_EQ(failed, BlocksOf(run.blocks, 0, 63));
  EXPECT_THAT(run.failed_requests, ElementsAreArray({"b"})) << "reported failed, by request too";
  EXPECT_EQ(b.worker().Stats().async_requests_in_flight, 0u);
  EXPECT_EQ(b.worker().Stats().async_requests_loaded, 1u);
}

TEST_F(WorkerConnectorAsyncTest, AWorkerWithoutAsyncLoadsFailsAndReportsThem) {
  Engine scheduler_side(daemon_.socket_path(), Async);
  Engine worker_side(daemon_.socket_path());  // async_loads off
  const std::vector<int32_t> blocks = {3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18};
  const MatchResult match = scheduler_side.scheduler().GetNumNewMatchedTokens(
      {.request_id = "m", .prompt_tokens = prompt_}, 0);
  ASSERT_TRUE(match.load_async);
  ASSERT_TRUE(scheduler_side.scheduler().UpdateStateAfterAlloc("m", blocks, match.num_tokens).ok());
  const ConnectorMetadata meta = scheduler_side.scheduler().BuildConnectorMeta({});
  EXPECT_EQ(worker_side.worker().StartLoadKv(meta).code(), absl::StatusCode::kFailedPrecondition);
  ASSERT_TRUE(worker_side.worker().WaitForSave().ok());
  const FinishedRequests done = worker_side.worker().GetFinished({});
  EXPECT_THAT(done.finished_recving, ElementsAreArray({"m"}));
  EXPECT_THAT(done.failed_recving, ElementsAreArray({"m"}));
  EXPECT_THAT(worker_side.worker().GetBlockIdsWithLoadErrors(), ElementsAreArray(blocks));
}

TEST_F(WorkerConnectorAsyncTest, AWorkerDestroyedWithLoadsInFlightLeavesNothingBehind) {
  for (int i = 0; i < 3; ++i) {
    Engine b(daemon_.socket_path(), Async, nullptr, Form::kStacked, 6 + i);
    const MatchResult match =
        b.scheduler().GetNumNewMatchedTokens({.request_id = "x", .prompt_tokens = prompt_}, 0);
    if (!match.load_async) break;  // an earlier round promoted the chunks
    std::vector<int32_t> blocks(16);
    std::iota(blocks.begin(), blocks.end(), 20);
    ASSERT_TRUE(b.scheduler().UpdateStateAfterAlloc("x", blocks, match.num_tokens).ok());
    ASSERT_TRUE(b.worker().StartLoadKv(b.scheduler().BuildConnectorMeta({})).ok());
    // b goes out of scope with the load queued or in flight.
  }
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (daemon_.tier()->Stats().active_leases > 0 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(milliseconds(2));
  }
  EXPECT_EQ(daemon_.tier()->Stats().active_leases, 0u) << "the sessions' leases were released";
}

}  // namespace
}  // namespace strata::connector
