// host_forms_bench: host-tier chunks compressed in place and loaded back, against baselines
// measured in the same run (BASELINES.md). Prints one JSON object.
//
// --chunks chunks of Llama-3-8B geometry (32 layers, 8 KV heads, head_dim 128, bf16, 256-token
// chunks of 32 MiB; shaped KV, storage/codec/testing/shaped_kv.h) are committed to the host tier
// of a TieredStore (2 MiB pages, prefaulted arena, no tier below). Each of --rounds rounds:
//   1. copy: a memcpy of every chunk out of the arena into one warm buffer (this box's memory
//      speed over the same bytes);
//   2. encode alone: the codec's Encode of each chunk on one core, from a warm buffer;
//   3. Compress: TieredStore::Recode of the host tier, what the control API's Compress runs
//      (per chunk: encode, decode to check it and measure its error, swap the frame into the
//      chunk's own pages), side by side on --recode_threads threads ([host] codec_threads;
//      default the daemon's) and the caller's;
//   4. decode alone: the codec's Decode of each frame into a warm buffer, on one core;
//   5. load: TieredStore::AcquireForLoad of the whole chain, as an engine's PrepareLoad; the
//      loads thread decodes each chunk back into fresh arena pages (checked against the checksum
//      of what was encoded) and leases it; the leases are released at once;
//   6. load again, the chunks now plain: leases alone (a host hit).
// GB/s count the chunks' decoded bytes. The median round is reported, with the ratios the
// round's own baselines give. The error is the first round's: later rounds compress the chunks'
// decodes again, which a quantizer keeps as they are (error 0). No target: the codecs' targets are
// codec_bench's (decode on one core) and the disk tier's promotions.
//
// Usage: host_forms_bench [--codec=NAME] [--chunks=N] [--rounds=N] [--recode_threads=N]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <future>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "bench/support/flags.h"
#include "bench/support/model_layouts.h"
#include "core/fmt_absl.h"
#include "fmt/format.h"
#include "storage/codec/codec_registry.h"
#include "storage/codec/testing/shaped_kv.h"
#include "storage/host/host_tier.h"
#include "storage/host/test_util.h"
#include "storage/tiered/tiered_store.h"

namespace strata::storage {
namespace {

using Clock = std::chrono::steady_clock;

struct Flags {
  std::string codec = "int8";
  uint64_t chunks = 16;
  int rounds = 3;
  uint32_t recode_threads = CoresUpTo(4);  // [host] codec_threads; the daemon's default
};

struct Round {
  double copy_s = 0, encode_s = 0, compress_s = 0, decode_s = 0, load_s = 0, plain_load_s = 0;
  uint64_t stored_after = 0;
  double max_relative_error = 0;
};

double Seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

[[noreturn]] void Die(const std::string& message) {
  std::fprintf(stderr, "host_forms_bench: %s\n", message.c_str());
  std::exit(1);
}

// Runs AcquireForLoad of `keys` and waits for its leases, whichever way they come.
LoadLeases Load(TieredStore& store, const std::shared_ptr<const KvLayout>& layout,
                const std::vector<ChunkKey>& keys) {
  std::promise<LoadLeases> done;
  std::future<LoadLeases> result = done.get_future();
  std::optional<LoadLeases> now =
      store.AcquireForLoad(layout, keys, {.owner = 1},
                           [&done](LoadLeases leased) { done.set_value(std::move(leased)); });
  LoadLeases leased = now.has_value() ? *std::move(now) : result.get();
  if (!leased.failure.ok() || leased.leases.size() != keys.size()) {
    Die(fmt::format("load: {} of {} chunks: {}", leased.leases.size(), keys.size(),
                    leased.failure));
  }
  return leased;
}

int Main(const Flags& flags) {
  absl::StatusOr<const Codec*> found = CodecRegistry::Find(flags.codec);
  if (!found.ok()) Die(fmt::format("{}", found.status()));
  const Codec& codec = **found;
  const auto layout = std::make_shared<const KvLayout>(bench::Llama8bLayout());
  const uint64_t chunk_bytes = layout->chunk_bytes(layout->chunk_tokens);
  const uint64_t total_bytes = flags.chunks * chunk_bytes;
  constexpr uint64_t kPage = 2u << 20;
  // The chunks, and room to decode one beside its frame.
  absl::StatusOr<std::unique_ptr<TieredStore>> opened =
      TieredStore::Create({.host = {.capacity_bytes = total_bytes + 2 * chunk_bytes,
                                    .page_bytes = kPage,
                                    .prefault = true},
                           .host_codec = {.recode_threads = flags.recode_threads}});
  if (!opened.ok()) Die(fmt::format("open the store: {}", opened.status()));
  TieredStore& store = **opened;
  if (absl::Status noted = store.NoteLayout(*layout); !noted.ok()) {
    Die(fmt::format("note the layout: {}", noted));
  }

  const std::vector<std::byte> source =
      testing::MakeKv(*layout, layout->chunk_tokens, testing::KvShape::kShaped, 7);
  std::vector<ChunkKey> keys;
  for (uint64_t i = 0; i < flags.chunks; ++i) {
    keys.push_back(testing::SyntheticKey(*layout, 1'000 + i));
    absl::StatusOr<ReserveResult> reserved =
        store.host().Reserve(*layout, keys.back(), {.num_tokens = layout->chunk_tokens});
    if (!reserved.ok() || reserved->outcome != ReserveOutcome::kReserved) {
      Die(fmt::format("reserve chunk {}", i));
    }
    reserved->reservation.payload().CopyFrom(source);
    if (absl::Status s = store.host().Commit(std::move(reserved->reservation)); !s.ok()) {
      Die(fmt::format("commit: {}", s));
    }
  }
  std::vector<std::byte> warm(chunk_bytes);
  std::memcpy(warm.data(), source.data(), chunk_bytes);  // faulted in before any timing
  absl::StatusOr<std::vector<std::byte>> frame =
      codec.Encode(*layout, layout->chunk_tokens, source, {});
  if (!frame.ok()) Die(fmt::format("encode: {}", frame.status()));

  std::vector<Round> rounds(static_cast<size_t>(flags.rounds));
  for (Round& round : rounds) {
    auto start = Clock::now();
    {
      LoadLeases leased = Load(store, layout, keys);
      for (const ChunkLease& lease : leased.leases) lease.payload().CopyTo(warm);
      round.copy_s = Seconds(Clock::now() - start);
    }
    start = Clock::now();
    for (uint64_t i = 0; i < flags.chunks; ++i) {
      if (!codec.Encode(*layout, layout->chunk_tokens, source, {}).ok()) Die("encode");
    }
    round.encode_s = Seconds(Clock::now() - start);

    start = Clock::now();
    absl::StatusOr<RecodeTotals> compressed = store.Recode(keys, Tier::kHost, {.codec = &codec});
    round.compress_s = Seconds(Clock::now() - start);
    if (!compressed.ok()) Die(fmt::format("compress: {}", compressed.status()));
    if (compressed->recoded != flags.chunks) Die("compress: not every chunk was compressed");
    round.stored_after = compressed->stored_bytes_after;
    round.max_relative_error = compressed->max_error.relative_frobenius;

    start = Clock::now();
    for (uint64_t i = 0; i < flags.chunks; ++i) {
      if (!codec.Decode(*layout, *frame, warm).ok()) Die("decode");
    }
    round.decode_s = Seconds(Clock::now() - start);

    start = Clock::now();
    Load(store, layout, keys);  // decodes every chunk back in place
    round.load_s = Seconds(Clock::now() - start);
    if (store.host().Stats().encoded_chunks != 0) Die("load: chunks left encoded");

    start = Clock::now();
    Load(store, layout, keys);
    round.plain_load_s = Seconds(Clock::now() - start);
  }
  const double first_round_error = rounds.front().max_relative_error;
  std::sort(rounds.begin(), rounds.end(),
            [](const Round& a, const Round& b) { return a.load_s < b.load_s; });
  const Round& median = rounds[rounds.size() / 2];
  const double gb = static_cast<double>(total_bytes) / 1e9;
  std::string per_round;
  for (const Round& round : rounds) {
    per_round += fmt::format("{}{:.3f}", per_round.empty() ? "" : ", ", gb / round.load_s);
  }
  std::printf(
      "%s\n",
      fmt::format(
          "{{\"codec\": \"{}\", \"chunks\": {}, \"chunk_bytes\": {}, \"rounds\": {}, "
          "\"recode_threads\": {},\n"
          "  \"stored_ratio\": {:.3f}, \"max_relative_error\": {:.5f},\n"
          "  \"copy_GBps\": {:.3f}, \"encode_alone_GBps\": {:.3f}, \"decode_alone_GBps\": {:.3f},\n"
          "  \"compress_GBps\": {:.3f}, \"compress_vs_encode_alone\": {:.3f},\n"
          "  \"compressed_load_GBps\": {:.3f}, \"compressed_load_vs_decode_alone\": {:.3f}, "
          "\"compressed_load_vs_copy\": {:.3f},\n"
          "  \"compressed_load_GBps_by_round\": [{}],\n"
          "  \"plain_load_ms\": {:.3f}}}",
          codec.name(), flags.chunks, chunk_bytes, rounds.size(), flags.recode_threads,
          static_cast<double>(total_bytes) / static_cast<double>(median.stored_after),
          first_round_error, gb / median.copy_s, gb / median.encode_s, gb / median.decode_s,
          gb / median.compress_s, median.encode_s / median.compress_s, gb / median.load_s,
          median.decode_s / median.load_s, median.copy_s / median.load_s, per_round,
          median.plain_load_s * 1e3)
          .c_str());
  return 0;
}

}  // namespace
}  // namespace strata::storage

int main(int argc, char** argv) {
  strata::storage::Flags flags;
  const bool parsed = strata::bench::ParseFlags(
      argc, argv, "[--codec=NAME] [--chunks=N] [--rounds=N] [--recode_threads=N]",
      [&](std::string_view name, const std::string& value) {
        if (name == "--codec") {
          flags.codec = value;
        } else if (name == "--chunks") {
          flags.chunks = std::stoull(value);
        } else if (name == "--rounds") {
          flags.rounds = std::stoi(value);
        } else if (name == "--recode_threads") {
          flags.recode_threads = static_cast<uint32_t>(std::stoul(value));
        } else {
          return false;
        }
        return true;
      });
  if (!parsed) return 2;
  if (flags.chunks == 0 || flags.rounds <= 0) {
    std::fprintf(stderr, "host_forms_bench: --chunks and --rounds must be positive\n");
    return 2;
  }
  return strata::storage::Main(flags);
}
