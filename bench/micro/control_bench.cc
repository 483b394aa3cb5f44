// Control API micro-benchmarks (Release), through real gRPC over loopback TCP in one process,
// with 1M one-page chunks indexed in the host tier:
//   BM_Stats             one Stats RPC.
//   BM_ListChunksPage    one 1000-entry ListChunks page (walking the whole listing page by page),
//                        as ChunkEntry messages (/0) and as columns (/1).
//   BM_TierListChunks1000  the host tier's share of it (no gRPC, no protobuf).
//   BM_Health            a trivial unary RPC: the baseline for BM_Lookup.
//   BM_LookupChain128    Lookup by keys of a 128-chunk chain, all hits.
//   BM_LookupVsHealth    the two alternately (same load for both): their throughput ratio; /0 by
//                        the 128 keys, by the 32K tokens of 128 chunks (what routers send: the
//                        daemon hashes them) in LookupRequest.tokens (/1, varints) or
//                        tokens_fixed32 (/2).
// Targets: Stats and a 1000-entry page <= 1 ms each; Lookup by keys >= 0.7x the trivial RPC's
// throughput, by 32K tokens >= 0.5x (what a router sends the controller, too).
#include <time.h>

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "benchmark/benchmark.h"
#include "core/check.h"
#include "core/key_hasher.h"
#include "daemon/control_service.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/security/credentials.h"
#include "grpcpp/security/server_credentials.h"
#include "grpcpp/server_builder.h"
#include "proto/convert.h"
#include "storage/host/test_util.h"
#include "storage/tiered/tiered_store.h"

namespace strata::daemon {
namespace {

constexpr uint64_t kChunks = 1'000'000;
constexpr uint64_t kTokenChunks = 128;

// One tier of kChunks one-token chunks (256-byte pages, payloads never touched) behind a
// ControlService on an ephemeral port; built once for every benchmark.
struct Fixture {
  Fixture() {
    layout = storage::testing::SmallLayout();
    storage::HostTierOptions options;
    options.page_bytes = 256;
    options.capacity_bytes = (kChunks + kTokenChunks) * 256;
    store = *storage::TieredStore::Create({.host = options});
    tier = &store->host();
    for (uint64_t id = 0; id < kChunks; ++id) {
      auto r = tier->Reserve(layout, storage::testing::SyntheticKey(layout, id), {.num_tokens = 1});
      STRATA_CHECK(r.ok() && r->outcome == storage::ReserveOutcome::kReserved);
      STRATA_CHECK(tier->Commit(std::move(r->reservation)).ok());
    }
    // The chain of a 32K-token prompt, in 256-token chunks (payloads of one page: a lookup reads
    // none).
    token_layout = layout;
    token_layout.chunk_tokens = 256;
    for (uint32_t i = 0; i < kTokenChunks * token_layout.chunk_tokens; ++i) {
      prompt.push_back(static_cast<uint32_t>(storage::testing::Mix64(i) % 128'000));
    }
    const KeyHasher hasher = *KeyHasher::Create(token_layout, {});
    for (const ChunkKey& key : hasher.PrefixKeys(prompt, {})) {
      auto r = tier->Reserve(token_layout, key, {.num_tokens = 1});
      STRATA_CHECK(r.ok() && r->outcome == storage::ReserveOutcome::kReserved);
      STRATA_CHECK(tier->Commit(std::move(r->reservation)).ok());
    }
    // Lookups are counted, as the daemon counts them.
    service = std::make_unique<ControlService>(
        ControlServiceOptions{.store = store.get(), .events = &events, .lookups = &lookups});
    grpc::ServerBuilder builder;
    int port = 0;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
    builder.RegisterService(service.get());
    server = builder.BuildAndStart();
    stub = v1::StrataControl::NewStub(grpc::CreateChannel("127.0.0.1:" + std::to_string(port),
                                                          grpc::InsecureChannelCredentials()));
  }

  KvLayout layout;
  KvLayout token_layout;         // layout, in 256-token chunks
  std::vector<uint32_t> prompt;  // kTokenChunks chunks of token_layout, all indexed
  EventLog events{1024};
  LookupAccounting lookups;
  std::unique_ptr<storage::TieredStore> store;
  storage::HostTier* tier = nullptr;  // the store's
  std::unique_ptr<ControlService> service;
  std::unique_ptr<grpc::Server> server;
  std::unique_ptr<v1::StrataControl::Stub> stub;
};

Fixture& Shared() {
  static Fixture* fixture = new Fixture();
  return *fixture;
}

void BM_Stats(benchmark::State& state) {
  Fixture& f = Shared();
  for (auto _ : state) {
    grpc::ClientContext context;
    v1::StatsResponse response;
    STRATA_CHECK(f.stub->Stats(&context, v1::StatsRequest(), &response).ok());
    STRATA_CHECK(response.tiers(0).chunks() == kChunks + kTokenChunks);
  }
}
BENCHMARK(BM_Stats)->UseRealTime()->Unit(benchmark::kMicrosecond);

// Arg 1: the columnar form (ListChunksRequest.columnar); 0: ChunkEntry messages.
void BM_ListChunksPage(benchmark::State& state) {
  Fixture& f = Shared();
  v1::ListChunksRequest request;
  request.set_page_size(1000);
  request.set_columnar(state.range(0) == 1);
  for (auto _ : state) {
    grpc::ClientContext context;
    // Parsed onto an arena, as a client listing many pages should (see control.proto).
    google::protobuf::Arena arena;
    auto* response = google::protobuf::Arena::CreateMessage<v1::ListChunksResponse>(&arena);
    STRATA_CHECK(f.stub->ListChunks(&context, request, response).ok());
    const int listed =
        request.columnar() ? response->columns().size_bytes_size() : response->chunks_size();
    STRATA_CHECK(listed == 1000 || response->next_page_token().empty());
    request.set_page_token(response->next_page_token());
  }
}
BENCHMARK(BM_ListChunksPage)->Arg(0)->Arg(1)->UseRealTime()->Unit(benchmark::kMicrosecond);

// The host tier's share of a page: ListChunks without gRPC.
void BM_TierListChunks1000(benchmark::State& state) {
  Fixture& f = Shared();
  uint64_t cursor = 0;
  for (auto _ : state) {
    storage::ChunkPage page = f.tier->ListChunks({.cursor = cursor, .limit = 1000});
    cursor = page.next_cursor;
    benchmark::DoNotOptimize(page);
  }
}
BENCHMARK(BM_TierListChunks1000)->UseRealTime()->Unit(benchmark::kMicrosecond);

void BM_Health(benchmark::State& state) {
  Fixture& f = Shared();
  for (auto _ : state) {
    grpc::ClientContext context;
    v1::HealthResponse response;
    STRATA_CHECK(f.stub->Health(&context, v1::HealthRequest(), &response).ok());
  }
}
BENCHMARK(BM_Health)->UseRealTime()->Unit(benchmark::kMicrosecond);

void BM_LookupChain128(benchmark::State& state) {
  Fixture& f = Shared();
  v1::LookupRequest request;
  for (uint64_t id = 0; id < 128; ++id) {
    *request.add_keys() = ToProto(storage::testing::SyntheticKey(f.layout, id * 7));
  }
  for (auto _ : state) {
    grpc::ClientContext context;
    v1::LookupResponse response;
    STRATA_CHECK(f.stub->Lookup(&context, request, &response).ok());
    STRATA_CHECK(response.matched_chunks() == 128);
  }
}
BENCHMARK(BM_LookupChain128)->UseRealTime()->Unit(benchmark::kMicrosecond);

double ProcessCpuSeconds() {
  timespec ts;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return double(ts.tv_sec) + double(ts.tv_nsec) * 1e-9;
}

// Health and a 128-chunk Lookup alternately, so both see the same load on a shared machine:
// wall and whole-process CPU (client and server) per call, and their throughput ratio.
// Arg 0: by keys; 1: by the 32K tokens of a prompt, as varints; 2: the same as fixed32.
void BM_LookupVsHealth(benchmark::State& state) {
  Fixture& f = Shared();
  v1::LookupRequest request;
  if (state.range(0) == 0) {
    for (uint64_t id = 0; id < 128; ++id) {
      *request.add_keys() = ToProto(storage::testing::SyntheticKey(f.layout, id * 7));
    }
  } else {
    *request.mutable_layout() = ToProto(f.token_layout);
    auto* tokens =
        state.range(0) == 1 ? request.mutable_tokens() : request.mutable_tokens_fixed32();
    tokens->Assign(f.prompt.begin(), f.prompt.end());
  }
  using Clock = std::chrono::steady_clock;
  double health_s = 0, lookup_s = 0, health_cpu = 0, lookup_cpu = 0;
  for (auto _ : state) {
    const Clock::time_point t0 = Clock::now();
    const double c0 = ProcessCpuSeconds();
    {
      grpc::ClientContext context;
      v1::HealthResponse response;
      STRATA_CHECK(f.stub->Health(&context, v1::HealthRequest(), &response).ok());
    }
    const Clock::time_point t1 = Clock::now();
    const double c1 = ProcessCpuSeconds();
    {
      grpc::ClientContext context;
      v1::LookupResponse response;
      STRATA_CHECK(f.stub->Lookup(&context, request, &response).ok());
      STRATA_CHECK(response.matched_chunks() == 128);
    }
    const double c2 = ProcessCpuSeconds();
    health_s += std::chrono::duration<double>(t1 - t0).count();
    lookup_s += std::chrono::duration<double>(Clock::now() - t1).count();
    health_cpu += c1 - c0;
    lookup_cpu += c2 - c1;
  }
  const double n = double(state.iterations());
  state.counters["health_us"] = health_s / n * 1e6;
  state.counters["lookup_us"] = lookup_s / n * 1e6;
  state.counters["health_cpu_us"] = health_cpu / n * 1e6;
  state.counters["lookup_cpu_us"] = lookup_cpu / n * 1e6;
  state.counters["lookup_throughput_ratio"] = health_s / lookup_s;
}
BENCHMARK(BM_LookupVsHealth)->Arg(0)->Arg(1)->Arg(2)->UseRealTime()->Unit(benchmark::kMicrosecond);

}  // namespace
}  // namespace strata::daemon

BENCHMARK_MAIN();
