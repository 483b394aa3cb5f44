// disk_tier_bench: the disk tier against fio on the same directory, in the same run
// (BASELINES.md). Prints one JSON object.
//
//   1. sequential store of --total_mib of 32 MiB chunks through DiskTier::PutBatch, --batch
//      chunks per call (1: one Put per chunk, each with its own fdatasync), and fio
//      writing as many bytes with the tier's request size (--request_kib, default 2 MiB),
//      O_DIRECT, io_uring, at the depth the tier reaches on one chunk (its requests per chunk,
//      at most its queue depth of 32: 16 for 2 MiB);
//   2. sequential load of those chunks through DiskTier::Read into an aligned buffer (checksum
//      verified), and fio reading them back the same way;
//   3. index recovery: --recovery_chunks small chunks (8 KiB records) are stored, the tier is
//      closed, and DiskTier::Open is timed until it serves again;
//   4. promotion latency: a --promotion_tokens prefix of Llama-3.1-8B geometry (32 layers, 8 KV
//      heads, head_dim 128, bf16, 256-token chunks of 32 MiB) is stored on disk, then brought
//      into a host tier (2 MiB pages, prefaulted arena) in runs of --promotion_run chunks
//      (default 8, as a load does; 1: chunk by chunk) with PromoteRun on
//      one thread, as the daemon's session thread does; fio reads as many bytes with the tier's
//      request size, O_DIRECT, io_uring, at the tier's depth, on the same device, each round.
//      The host tier is emptied between rounds. --total_mib=0 / --recovery_chunks=0 /
//      --promotion_tokens=0 skip phases 1-2 / 3 / 4.
//   5. with --codec=NAME (a CodecRegistry name, e.g. int8): phase 4 again with the prefix stored
//      encoded by that codec through DiskLowerTier ([disk] codec; the chunks are shaped KV,
//      storage/codec/testing/shaped_kv.h, so the codec sees what it would on a model), and the
//      chunks promoted per second against phase 4's (target: >= 1.6x at int8). The
//      chunks decode on --decode_threads threads ([disk] codec_threads; default the daemon's,
//      the cores up to 4; 0: on the promoting thread) while the next ones are read.
//   6. with --codec=NAME and --compress_tokens > 0: a --compress_tokens prefix of shaped KV is
//      stored as it is, then a TieredStore opens that disk and compresses it in place
//      (TieredStore::Recode, what the control API's Compress runs: per chunk read, encode,
//      decode to measure the error, write and sync, swap; chunks side by side on
//      --decode_threads recode threads, [disk] codec_threads, and the caller), then decompresses
//      it the same way; against the codec's Encode alone over the same chunks on one core in the
//      same run. No target.
// --register_buffers (default true; =false turns it off) registers the memory the tier reads
// into and writes from (phases 1-2: the source and target buffers; phase 4: the source buffer,
// then the host arena) with the tier's io engines (DiskTier::RegisterMemory). Each timed loop
// also reports the process's CPU time (user + system, getrusage; fio runs in a child and is not
// counted) per GB moved.
//
// Usage: disk_tier_bench [--dir=PATH] [--total_mib=N] [--recovery_chunks=N] [--rounds=N]
//                        [--request_kib=N] [--engine=KIND] [--batch=N] [--promotion_tokens=N]
//                        [--promotion_run=N] [--register_buffers=true|false] [--codec=NAME]
//                        [--compress_tokens=N] [--decode_threads=N]
// --dir must be on the device under test (default: ./disk_tier_bench_data, removed after).
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "bench/support/flags.h"
#include "bench/support/model_layouts.h"
#include "core/fmt_absl.h"
#include "fmt/format.h"
#include "storage/codec/codec_registry.h"
#include "storage/codec/testing/shaped_kv.h"
#include "storage/disk/disk_tier.h"
#include "storage/disk/record_format.h"
#include "storage/host/host_tier.h"
#include "storage/host/payload_view.h"
#include "storage/host/test_util.h"
#include "storage/io/aligned_buffer.h"
#include "storage/tiered/chunk_transfer.h"
#include "storage/tiered/disk_lower_tier.h"
#include "storage/tiered/tiered_store.h"

namespace strata::storage {
namespace {

using Clock = std::chrono::steady_clock;

constexpr uint64_t kChunkBytes = 32ull << 20;
constexpr uint64_t kFingerprint = 0xBE7C4u;

struct Flags {
  std::string dir = "disk_tier_bench_data";
  uint64_t total_mib = 2048;
  uint64_t recovery_chunks = 100000;
  std::string engine = "auto";
  int rounds = 3;
  // Request size of the tier (max_io_bytes) and block size of fio.
  uint32_t request_kib = 2048;
  // Chunks per PutBatch in the store phase.
  uint64_t batch = 4;
  // Tokens of the promoted prefix (a multiple of 256); 32K tokens are 4 GiB.
  uint64_t promotion_tokens = 32768;
  // Register the transfer buffers with the tier's io engines.
  bool register_buffers = true;
  // Chunks promoted per PromoteRun call (8: what a load's PrepareLoad does; 1: chunk
  // by chunk).
  uint64_t promotion_run = 8;
  // Phase 5's and 6's codec; empty: neither phase.
  std::string codec;
  // Tokens of phase 6's prefix (a multiple of 256; 0: no phase 6).
  uint64_t compress_tokens = 8192;
  // Phase 5's decode threads ([disk] codec_threads; the daemon's default).
  uint32_t decode_threads = CoresUpTo(4);
};

uint32_t g_io_bytes = 2u << 20;

double Seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

// CPU time (user + system) of this process's threads so far.
double CpuSeconds() {
  rusage usage{};
  ::getrusage(RUSAGE_SELF, &usage);
  auto seconds = [](const timeval& t) { return static_cast<double>(t.tv_sec) + t.tv_usec * 1e-6; };
  return seconds(usage.ru_utime) + seconds(usage.ru_stime);
}

// Registers `regions` with the tier's engines when --register_buffers; returns the seconds it
// took. A refusal is reported and the run goes on unregistered.
double Register(const Flags& flags, DiskTier& tier, std::span<const std::span<std::byte>> regions) {
  if (!flags.register_buffers) return 0;
  const auto start = Clock::now();
  if (absl::Status status = tier.RegisterMemory(regions); !status.ok()) {
    std::fprintf(stderr, "disk_tier_bench: buffers not registered: %s\n",
                 status.ToString().c_str());
  }
  return Seconds(Clock::now() - start);
}

[[noreturn]] void Die(const std::string& message) {
  std::fprintf(stderr, "disk_tier_bench: %s\n", message.c_str());
  std::exit(1);
}

// Runs fio and returns the bandwidth (bytes/s) of `direction` ("read" or "write") from its JSON.
double RunFio(const std::string& file, const std::string& direction, uint64_t size_bytes) {
  // As deep as the tier goes on one chunk: its requests, up to its queue depth (32).
  const uint64_t iodepth = std::min<uint64_t>(32, kChunkBytes / g_io_bytes);
  const std::string command = fmt::format(
      "fio --name=strata-{0} --filename={1} --rw={0} --bs={2} --direct=1 --ioengine=io_uring "
      "--iodepth={4} --size={3} --end_fsync=1 --group_reporting --output-format=json 2>/dev/null",
      direction, file, g_io_bytes, size_bytes, iodepth);
  FILE* pipe = ::popen(command.c_str(), "r");
  if (pipe == nullptr) Die("cannot run fio");
  std::string json;
  char buffer[4096];
  while (size_t n = std::fread(buffer, 1, sizeof(buffer), pipe)) json.append(buffer, n);
  if (::pclose(pipe) != 0) Die("fio failed: " + command);
  const size_t section = json.find(fmt::format("\"{}\" : {{", direction));
  const size_t field = json.find("\"bw_bytes\" : ", section);
  if (section == std::string::npos || field == std::string::npos) Die("unexpected fio output");
  return std::stod(json.substr(field + std::strlen("\"bw_bytes\" : ")));
}

std::unique_ptr<DiskTier> OpenTier(const std::string& dir, uint64_t capacity_bytes,
                                   IoEngineKind kind) {
  auto tier = DiskTier::Open({.directory = dir,
                              .capacity_bytes = capacity_bytes,
                              .io = {.kind = kind},
                              .max_io_bytes = g_io_bytes});
  if (!tier.ok()) Die(fmt::format("open {}: {}", dir, tier.status()));
  return std::move(tier).value();
}

struct PromotionRound {
  double promote_s = 0;  // all chunks, one after another
  double chunk_p50_s = 0, chunk_max_s = 0;
  double fio_read = 0;  // bytes/s
  double cpu_s = 0;     // of the promotions
};

struct PromotionResult {
  std::string json;
  double median_promote_s = 0;
};

// The chunks of a prefix of `tokens` (the value of `flag`), which must be whole chunks.
uint64_t PrefixChunks(const KvLayout& layout, uint64_t tokens, std::string_view flag) {
  if (tokens % layout.chunk_tokens != 0) {
    Die(fmt::format("{}={} is not a multiple of {}", flag, tokens, layout.chunk_tokens));
  }
  return tokens / layout.chunk_tokens;
}

// Phase 4 (no codec) or 5; returns its JSON member and median time.
PromotionResult RunPromotion(const Flags& flags, IoEngineKind kind, const Codec* codec) {
  const KvLayout layout = bench::Llama8bLayout();
  const uint64_t chunk_bytes = layout.chunk_bytes(layout.chunk_tokens);
  const uint64_t chunks = PrefixChunks(layout, flags.promotion_tokens, "--promotion_tokens");
  const uint64_t total_bytes = chunks * chunk_bytes;
  const std::string tier_dir = flags.dir + "/promotion";
  const std::string fio_file = flags.dir + "/promotion_fio.dat";
  auto disk = OpenTier(tier_dir, total_bytes + (1ull << 30), kind);
  const std::string engine_name = disk->engine_name();

  // The disk tier as the tiered store's promotions see it, encoding with `codec`.
  DiskLowerTier below(disk.get(), {.codecs = {.fallback = {.codec = codec}},
                                   .decode_threads = flags.decode_threads});
  below.NoteLayout(layout);

  // Store the prefix: distinct chunks (a stamped pattern; with a codec, shaped KV, the same for
  // every chunk), one per put.
  AlignedBuffer source(chunk_bytes);
  const std::span<std::byte> source_region[] = {source.span()};
  Register(flags, *disk, source_region);
  std::memcpy(
      source.data(),
      codec == nullptr
          ? testing::Pattern(2, chunk_bytes).data()
          : testing::MakeKv(layout, layout.chunk_tokens, testing::KvShape::kShaped, 2).data(),
      chunk_bytes);
  std::vector<ChunkKey> keys;
  for (uint64_t i = 0; i < chunks; ++i) {
    keys.push_back(testing::SyntheticKey(layout, i));
    if (codec == nullptr) std::memcpy(source.data(), &i, sizeof(i));
    const std::span<const std::byte> part = source.span();
    const absl::Status status = below.PutOne({.key = keys.back(),
                                              .payload = std::span(&part, 1),
                                              .payload_checksum = ChecksumBytes(source.span()),
                                              .num_tokens = layout.chunk_tokens});
    if (!status.ok()) Die(fmt::format("promotion put: {}", status));
  }
  const DiskTierStats stored = disk->stats();
  if (codec != nullptr && stored.encoded_chunks != chunks) Die("promotion put: not encoded");

  auto host = HostTier::Create({.capacity_bytes = total_bytes,
                                .page_bytes = 2u << 20,
                                .prefault = true,
                                .arena_name = "strata-disk-tier-bench"});
  if (!host.ok()) Die(fmt::format("host tier: {}", host.status()));
  const std::span<std::byte> arena[] = {{(*host)->arena_base(), (*host)->arena_size_bytes()}};
  const double register_s = Register(flags, *disk, arena);

  std::vector<PromotionRound> rounds(flags.rounds);
  for (PromotionRound& round : rounds) {
    (*host)->RemoveAll();
    std::vector<double> per_chunk;
    const double cpu_start = CpuSeconds();
    const auto start = Clock::now();
    for (size_t first = 0; first < keys.size(); first += flags.promotion_run) {
      const std::span<const ChunkKey> run = std::span(keys).subspan(
          first, std::min<size_t>(flags.promotion_run, keys.size() - first));
      const auto run_start = Clock::now();
      for (const absl::StatusOr<PromoteOutcome>& outcome : PromoteRun(below, **host, layout, run)) {
        if (!outcome.ok()) Die(fmt::format("promote: {}", outcome.status()));
        if (*outcome != PromoteOutcome::kPromoted) Die("promote: chunk not promoted");
      }
      // Per chunk: the run's time shared by its chunks.
      per_chunk.insert(per_chunk.end(), run.size(),
                       Seconds(Clock::now() - run_start) / static_cast<double>(run.size()));
    }
    round.promote_s = Seconds(Clock::now() - start);
    round.cpu_s = CpuSeconds() - cpu_start;
    std::sort(per_chunk.begin(), per_chunk.end());
    round.chunk_p50_s = per_chunk[per_chunk.size() / 2];
    round.chunk_max_s = per_chunk.back();
    round.fio_read = RunFio(fio_file, "read", total_bytes);
  }
  // The promoted chunks are whole: each lease verifies the chunk's checksum (with a codec, the
  // decoded chunk's), and its stamp.
  for (uint64_t i = 0; i < chunks; ++i) {
    auto lease = (*host)->Acquire(keys[i]);
    if (!lease.ok() || !lease->has_value()) Die(fmt::format("promoted chunk {} unreadable", i));
    if (codec != nullptr) continue;
    uint64_t stamp = 0;
    std::memcpy(&stamp, (*lease)->payload().range_bytes(0).data(), sizeof(stamp));
    if (stamp != i) Die(fmt::format("promoted chunk {} holds chunk {}", i, stamp));
  }
  // The arena goes first: no engine may keep it registered.
  Register(flags, *disk, {});
  host->reset();
  disk.reset();
  std::filesystem::remove(fio_file);
  std::filesystem::remove_all(tier_dir);

  // promote_s * fio_read is the time ratio times total_bytes.
  std::sort(rounds.begin(), rounds.end(), [](const PromotionRound& a, const PromotionRound& b) {
    return a.promote_s * a.fio_read < b.promote_s * b.fio_read;
  });
  std::string per_round;
  for (const PromotionRound& round : rounds) {
    const double fio_s = static_cast<double>(total_bytes) / round.fio_read;
    per_round += fmt::format(
        "{}{{\"promote_ms\": {:.1f}, \"fio_read_ms\": {:.1f}, \"ratio\": {:.3f}, "
        "\"promote_GBps\": {:.3f}, \"fio_read_GBps\": {:.3f}, \"chunk_p50_ms\": {:.2f}, "
        "\"chunk_max_ms\": {:.2f}, \"cpu_s_per_GB\": {:.3f}}}",
        per_round.empty() ? "" : ",\n      ", round.promote_s * 1e3, fio_s * 1e3,
        round.promote_s / fio_s, static_cast<double>(total_bytes) / round.promote_s / 1e9,
        round.fio_read / 1e9, round.chunk_p50_s * 1e3, round.chunk_max_s * 1e3,
        round.cpu_s / (static_cast<double>(total_bytes) / 1e9));
  }
  const PromotionRound& median = rounds[rounds.size() / 2];
  const std::string json = fmt::format(
      "{{\"engine\": \"{}\", \"codec\": \"{}\", \"decode_threads\": {}, \"stored_bytes\": {}, "
      "\"registered\": {}, "
      "\"register_ms\": {:.1f}, \"tokens\": {}, \"chunks\": {}, \"run_chunks\": {}, \"bytes\": {}, "
      "\"median_promote_ms\": {:.1f}, \"median_fio_read_ms\": {:.1f}, "
      "\"median_time_ratio\": {:.3f},\n    \"rounds_by_ratio\": [\n      {}]}}",
      engine_name, codec == nullptr ? "none" : codec->name(), flags.decode_threads,
      stored.payload_bytes, flags.register_buffers, register_s * 1e3, flags.promotion_tokens,
      chunks, flags.promotion_run, total_bytes, median.promote_s * 1e3,
      static_cast<double>(total_bytes) / median.fio_read * 1e3,
      median.promote_s * median.fio_read / static_cast<double>(total_bytes), per_round);
  return {.json = json, .median_promote_s = median.promote_s};
}

// Phase 6; returns its JSON member.
std::string RunCompress(const Flags& flags, IoEngineKind kind, const Codec& codec) {
  const KvLayout layout = bench::Llama8bLayout();
  const uint64_t chunk_bytes = layout.chunk_bytes(layout.chunk_tokens);
  const uint64_t chunks = PrefixChunks(layout, flags.compress_tokens, "--compress_tokens");
  const uint64_t total_bytes = chunks * chunk_bytes;
  const std::string tier_dir = flags.dir + "/compress";
  // Room for the chunks as they are and their encoded forms beside them.
  const uint64_t capacity_bytes = 2 * total_bytes + (1ull << 30);
  auto disk = OpenTier(tier_dir, capacity_bytes, kind);
  DiskLowerTier below(disk.get());
  below.NoteLayout(layout);

  AlignedBuffer source(chunk_bytes);
  std::memcpy(source.data(),
              testing::MakeKv(layout, layout.chunk_tokens, testing::KvShape::kShaped, 3).data(),
              chunk_bytes);
  const std::span<const std::byte> part = source.span();
  const uint64_t checksum = ChecksumBytes(source.span());
  std::vector<ChunkKey> keys;
  for (uint64_t i = 0; i < chunks; ++i) {
    keys.push_back(testing::SyntheticKey(layout, 1'000'000 + i));
    const absl::Status status = below.PutOne({.key = keys.back(),
                                              .payload = std::span(&part, 1),
                                              .payload_checksum = checksum,
                                              .num_tokens = layout.chunk_tokens});
    if (!status.ok()) Die(fmt::format("compress put: {}", status));
  }

  // The store opens the disk (as a restarted daemon does) and recodes the chunks on its recode
  // threads, as the control API's Compress and Decompress do.
  disk.reset();
  absl::StatusOr<std::unique_ptr<TieredStore>> store =
      TieredStore::Create({.host = {.capacity_bytes = 2u << 20},
                           .host_codec = {.recode_threads = flags.decode_threads},
                           .disk = TieredDiskOptions{.directory = tier_dir,
                                                     .capacity_bytes = capacity_bytes,
                                                     .codec_threads = flags.decode_threads}});
  if (!store.ok()) Die(fmt::format("compress: open the store: {}", store.status()));

  auto start = Clock::now();
  uint64_t encoded_bytes = 0;
  for (uint64_t i = 0; i < chunks; ++i) {
    absl::StatusOr<std::vector<std::byte>> frame =
        codec.Encode(layout, layout.chunk_tokens, source.span(), {});
    if (!frame.ok()) Die(fmt::format("encode: {}", frame.status()));
    encoded_bytes += frame->size();
  }
  const double encode_s = Seconds(Clock::now() - start);

  double cpu_start = CpuSeconds();
  start = Clock::now();
  absl::StatusOr<RecodeTotals> compressed = (*store)->Recode(keys, Tier::kDisk, {.codec = &codec});
  const double compress_s = Seconds(Clock::now() - start);
  const double compress_cpu_s = CpuSeconds() - cpu_start;
  if (!compressed.ok()) Die(fmt::format("compress: {}", compressed.status()));
  if (compressed->recoded != chunks) Die("compress: not every chunk was recoded");
  if (compressed->stored_bytes_after != encoded_bytes) {
    Die("compress: stored bytes differ from the codec's frames");
  }

  cpu_start = CpuSeconds();
  start = Clock::now();
  absl::StatusOr<RecodeTotals> decompressed = (*store)->Recode(keys, Tier::kDisk, {});
  const double decompress_s = Seconds(Clock::now() - start);
  const double decompress_cpu_s = CpuSeconds() - cpu_start;
  if (!decompressed.ok()) Die(fmt::format("decompress: {}", decompressed.status()));
  if (decompressed->recoded != chunks) Die("decompress: not every chunk was recoded");
  store->reset();
  std::filesystem::remove_all(tier_dir);

  const double gb = static_cast<double>(total_bytes) / 1e9;
  return fmt::format(
      "{{\"codec\": \"{}\", \"recode_threads\": {}, \"chunks\": {}, \"bytes\": {}, "
      "\"ratio\": {:.3f}, "
      "\"max_relative_error\": {:.5f},\n"
      "    \"encode_alone_GBps\": {:.3f}, \"compress_GBps\": {:.3f}, "
      "\"compress_chunks_per_s\": {:.2f}, \"compress_vs_encode_alone\": {:.3f}, "
      "\"compress_cpu_s_per_GB\": {:.3f},\n"
      "    \"decompress_GBps\": {:.3f}, \"decompress_cpu_s_per_GB\": {:.3f}}}",
      codec.name(), flags.decode_threads, chunks, total_bytes,
      static_cast<double>(total_bytes) / static_cast<double>(encoded_bytes),
      compressed->max_error.relative_frobenius, gb / encode_s, gb / compress_s,
      static_cast<double>(chunks) / compress_s, encode_s / compress_s, compress_cpu_s / gb,
      gb / decompress_s, decompress_cpu_s / gb);
}

int Main(const Flags& flags) {
  const auto kind = ParseIoEngineKind(flags.engine);
  if (!kind.ok()) Die(fmt::format("{}", kind.status()));
  std::filesystem::create_directories(flags.dir);
  const uint64_t chunks = flags.total_mib * (1ull << 20) / kChunkBytes;
  const uint64_t total_bytes = chunks * kChunkBytes;

  // Source chunk: one aligned buffer, its first 8 bytes made distinct per chunk; checksums are
  // computed before timing (the host tier hands them over with each chunk).
  AlignedBuffer source(kChunkBytes);
  std::memcpy(source.data(), testing::Pattern(1, kChunkBytes).data(), kChunkBytes);
  std::vector<uint64_t> checksums(chunks);
  for (uint64_t i = 0; i < chunks; ++i) {
    std::memcpy(source.data(), &i, sizeof(i));
    checksums[i] = ChecksumBytes(source.span());
  }
  // One source buffer per chunk of a batch (each chunk of a batch is distinct).
  std::vector<AlignedBuffer> sources;
  for (uint64_t j = 0; j < flags.batch; ++j) {
    sources.emplace_back(kChunkBytes);
    std::memcpy(sources.back().data(), source.data(), kChunkBytes);
  }

  // Rounds of fio write, tier store, tier load, fio read: the device is shared and noisy, so
  // each ratio compares runs seconds apart, and the median round is reported.
  struct Round {
    double fio_write = 0, tier_write = 0, tier_read = 0, fio_read = 0;
    double store_cpu_s = 0, load_cpu_s = 0;
  };
  AlignedBuffer target(kChunkBytes);
  std::vector<std::span<std::byte>> regions = {target.span()};
  for (AlignedBuffer& buffer : sources) regions.push_back(buffer.span());
  std::vector<Round> rounds(chunks > 0 ? flags.rounds : 0);
  std::string engine_name;
  for (Round& round : rounds) {
    const std::string fio_file = flags.dir + "/fio.dat";
    const std::string tier_dir = flags.dir + "/tier";
    round.fio_write = RunFio(fio_file, "write", total_bytes);
    {
      auto tier = OpenTier(tier_dir, total_bytes + (1ull << 30), *kind);
      engine_name = tier->engine_name();
      Register(flags, *tier, regions);
      const double store_cpu_start = CpuSeconds();
      const auto start = Clock::now();
      for (uint64_t first = 0; first < chunks; first += flags.batch) {
        const uint64_t n = std::min(flags.batch, chunks - first);
        std::vector<std::span<const std::byte>> parts;
        std::vector<DiskPut> puts;
        for (uint64_t j = 0; j < n; ++j) {
          const uint64_t i = first + j;
          std::memcpy(sources[j].data(), &i, sizeof(i));
          parts.push_back(sources[j].span());
        }
        for (uint64_t j = 0; j < n; ++j) {
          puts.push_back({.key = testing::SyntheticKey(kFingerprint, first + j),
                          .layout_fingerprint = kFingerprint,
                          .payload = std::span(&parts[j], 1),
                          .payload_checksum = checksums[first + j],
                          .num_tokens = 256});
        }
        for (const absl::Status& status : tier->PutBatch(puts)) {
          if (!status.ok()) Die(fmt::format("put: {}", status));
        }
      }
      round.tier_write = static_cast<double>(total_bytes) / Seconds(Clock::now() - start);
      round.store_cpu_s = CpuSeconds() - store_cpu_start;

      const double load_cpu_start = CpuSeconds();
      const auto read_start = Clock::now();
      for (uint64_t i = 0; i < chunks; ++i) {
        const absl::Status status =
            tier->Read(testing::SyntheticKey(kFingerprint, i), target.span());
        if (!status.ok()) Die(fmt::format("read: {}", status));
      }
      round.tier_read = static_cast<double>(total_bytes) / Seconds(Clock::now() - read_start);
      round.load_cpu_s = CpuSeconds() - load_cpu_start;
    }
    round.fio_read = RunFio(fio_file, "read", total_bytes);
    std::filesystem::remove(fio_file);
    std::filesystem::remove_all(tier_dir);
  }
  auto median = [&](auto field) {
    std::vector<double> values;
    for (const Round& round : rounds) values.push_back(field(round));
    if (values.empty()) return 0.0;
    std::sort(values.begin(), values.end());
    return values[values.size() / 2];
  };
  std::string per_round;
  for (const Round& round : rounds) {
    per_round += fmt::format(
        "{}{{\"store_ratio\": {:.3f}, \"load_ratio\": {:.3f}, \"tier_store_GBps\": {:.3f}, "
        "\"fio_write_GBps\": {:.3f}, \"tier_load_GBps\": {:.3f}, \"fio_read_GBps\": {:.3f}, "
        "\"store_cpu_s_per_GB\": {:.3f}, \"load_cpu_s_per_GB\": {:.3f}}}",
        per_round.empty() ? "" : ",\n    ", round.tier_write / round.fio_write,
        round.tier_read / round.fio_read, round.tier_write / 1e9, round.fio_write / 1e9,
        round.tier_read / 1e9, round.fio_read / 1e9,
        round.store_cpu_s / (static_cast<double>(total_bytes) / 1e9),
        round.load_cpu_s / (static_cast<double>(total_bytes) / 1e9));
  }

  // Index recovery with many small chunks, stored by two threads.
  const std::string recovery_dir = flags.dir + "/recovery";
  double populate_s = 0;
  double open_s = 0;
  uint64_t recovered_chunks = 0;
  if (flags.recovery_chunks > 0) {
    const uint64_t capacity = flags.recovery_chunks * 2 * kRecordHeaderBytes + (1ull << 30);
    {
      auto tier = OpenTier(recovery_dir, capacity, *kind);
      const auto start = Clock::now();
      std::vector<std::jthread> writers;
      for (uint64_t lane = 0; lane < 2; ++lane) {
        writers.emplace_back([&, lane] {
          const std::vector<std::byte> payload = testing::Pattern(lane, 1024);
          const uint64_t checksum = ChecksumBytes(payload);
          for (uint64_t i = lane; i < flags.recovery_chunks; i += 2) {
            const absl::Status status = tier->Put(testing::SyntheticKey(kFingerprint, i),
                                                  kFingerprint, payload, checksum, 4);
            if (!status.ok()) Die(fmt::format("put: {}", status));
          }
        });
      }
      writers.clear();
      populate_s = Seconds(Clock::now() - start);
    }
    const auto start = Clock::now();
    auto tier = OpenTier(recovery_dir, capacity, *kind);
    if (!tier->Contains(testing::SyntheticKey(kFingerprint, flags.recovery_chunks - 1))) {
      Die("recovery lost a chunk");
    }
    open_s = Seconds(Clock::now() - start);
    recovered_chunks = tier->stats().chunks;
    tier.reset();
    std::filesystem::remove_all(recovery_dir);
  }
  PromotionResult promotion{.json = "null"};
  if (flags.promotion_tokens > 0) promotion = RunPromotion(flags, *kind, nullptr);
  std::string codec_promotion = "null";
  std::string compress = "null";
  const Codec* codec = nullptr;
  if (!flags.codec.empty()) {
    absl::StatusOr<const Codec*> found = CodecRegistry::Find(flags.codec);
    if (!found.ok()) Die(fmt::format("--codec: {}", found.status()));
    codec = *found;
  }
  if (codec != nullptr && flags.promotion_tokens > 0) {
    const PromotionResult encoded = RunPromotion(flags, *kind, codec);
    const double ratio = promotion.median_promote_s / encoded.median_promote_s;
    codec_promotion = fmt::format(
        "{{\"chunks_per_s_vs_unencoded\": {:.3f}, \"target\": \">= 1.6 (int8)\", \"met\": {},\n"
        "    \"rounds\": {}}}",
        ratio, ratio >= 1.6, encoded.json);
  }
  if (codec != nullptr && flags.compress_tokens > 0) compress = RunCompress(flags, *kind, *codec);

  fmt::print(
      "{{\n"
      "  \"engine\": \"{}\", \"registered\": {},\n"
      "  \"chunk_bytes\": {}, \"chunks_per_round\": {}, \"request_bytes\": {}, "
      "\"store_batch\": {},\n"
      "  \"median_store_ratio\": {:.3f}, \"median_load_ratio\": {:.3f}, "
      "\"median_store_cpu_s_per_GB\": {:.3f}, \"median_load_cpu_s_per_GB\": {:.3f},\n"
      "  \"rounds\": [\n    {}],\n"
      "  \"recovery\": {{\"chunks\": {}, \"populate_s\": {:.2f}, \"open_s\": {:.3f}}},\n"
      "  \"promotion\": {},\n"
      "  \"codec_promotion\": {},\n"
      "  \"compress\": {}\n"
      "}}\n",
      engine_name, flags.register_buffers, kChunkBytes, chunks, g_io_bytes, flags.batch,
      median([](const Round& r) { return r.tier_write / r.fio_write; }),
      median([](const Round& r) { return r.tier_read / r.fio_read; }),
      median([&](const Round& r) { return r.store_cpu_s / (total_bytes / 1e9); }),
      median([&](const Round& r) { return r.load_cpu_s / (total_bytes / 1e9); }), per_round,
      recovered_chunks, populate_s, open_s, promotion.json, codec_promotion, compress);
  return 0;
}

}  // namespace
}  // namespace strata::storage

int main(int argc, char** argv) {
  strata::storage::Flags flags;
  const bool parsed = strata::bench::ParseFlags(
      argc, argv,
      "[--dir=PATH] [--total_mib=N] [--recovery_chunks=N] [--rounds=N] [--request_kib=N] "
      "[--engine=auto|io_uring|sync] [--batch=N] [--promotion_tokens=N] [--promotion_run=N] "
      "[--register_buffers=true|false] [--codec=NAME] [--compress_tokens=N] "
      "[--decode_threads=N]",
      [&](std::string_view name, const std::string& value) {
        if (name == "--dir") {
          flags.dir = value;
        } else if (name == "--total_mib") {
          flags.total_mib = std::stoull(value);
        } else if (name == "--recovery_chunks") {
          flags.recovery_chunks = std::stoull(value);
        } else if (name == "--request_kib") {
          flags.request_kib = static_cast<uint32_t>(std::stoul(value));
        } else if (name == "--rounds") {
          flags.rounds = std::max(1, std::stoi(value));
        } else if (name == "--batch") {
          flags.batch = std::max<uint64_t>(1, std::stoull(value));
        } else if (name == "--promotion_tokens") {
          flags.promotion_tokens = std::stoull(value);
        } else if (name == "--engine") {
          flags.engine = value;
        } else if (name == "--codec") {
          flags.codec = value;
        } else if (name == "--compress_tokens") {
          flags.compress_tokens = std::stoull(value);
        } else if (name == "--decode_threads") {
          flags.decode_threads = static_cast<uint32_t>(std::stoul(value));
        } else if (name == "--promotion_run") {
          flags.promotion_run = std::max<uint64_t>(1, std::stoull(value));
        } else if (name == "--register_buffers") {
          flags.register_buffers = value.empty() || value == "true" || value == "1";
        } else {
          return false;
        }
        return true;
      });
  if (!parsed) return 2;
  strata::storage::g_io_bytes = flags.request_kib << 10;
  return strata::storage::Main(flags);
}
