#include "storage/tiered/disk_lower_tier.h"

#include <algorithm>
#include <cstring>
#include <memory>
#include <utility>

#include "absl/cleanup/cleanup.h"
#include "core/status_util.h"
#include "fmt/format.h"
#include "spdlog/spdlog.h"
#include "storage/codec/codec_registry.h"
#include "storage/host/payload_view.h"
#include "storage/io/aligned_buffer.h"
#include "storage/tiered/chunk_codec.h"

namespace strata::storage {
namespace {

// What the store sees of a chunk on disk: the chunk as it decodes.
LowerTier::ChunkInfo FromDisk(const DiskChunkInfo& info) {
  LowerTier::ChunkInfo chunk{.payload_bytes = info.payload_bytes,
                             .payload_checksum = info.payload_checksum,
                             .num_tokens = info.num_tokens,
                             .stored_bytes = info.payload_bytes,
                             .tenant = info.tenant};
  if (info.encoding.encoded()) {
    chunk.payload_bytes = info.encoding.decoded_bytes;
    chunk.payload_checksum = info.encoding.decoded_checksum;
    chunk.codec = static_cast<CodecId>(info.encoding.codec);
    chunk.error = KeptError(info.encoding);
  }
  return chunk;
}

// The chunk of `put` encoded by `encoding`'s codec for `layout`, with its error measured, or
// nullopt when it is better stored as it is (the codec refuses it or it does not shrink).
// `chunk` and `decoded` are scratch of at least the chunk's size.
std::optional<EncodedForm> Encode(const LowerTier::Put& put, const KvLayout& layout,
                                  const CodecChoice& encoding, std::span<std::byte> chunk,
                                  std::span<std::byte> decoded) {
  const uint64_t bytes = layout.chunk_bytes(put.num_tokens);
  if (PartsBytes(put.payload) != bytes) return std::nullopt;
  chunk = chunk.first(bytes);
  decoded = decoded.first(bytes);
  size_t at = 0;
  for (std::span<const std::byte> part : put.payload) {
    std::memcpy(chunk.data() + at, part.data(), part.size());
    at += part.size();
  }
  absl::StatusOr<std::optional<EncodedForm>> encoded =
      EncodeChunk(*encoding.codec, encoding.params, layout, put.num_tokens, chunk, decoded);
  if (!encoded.ok() || !encoded->has_value()) return std::nullopt;
  KeepError(CompareKv(layout.dtype, chunk, decoded), (*encoded)->encoding);
  return **std::move(encoded);
}

}  // namespace

std::optional<LowerTier::ChunkInfo> DiskLowerTier::Lookup(const ChunkKey& key) const {
  const std::optional<DiskChunkInfo> info = disk_->Lookup(key);
  if (!info.has_value()) return std::nullopt;
  return FromDisk(*info);
}

absl::StatusOr<LowerTier::ListPage> DiskLowerTier::List(const ListOptions& options) const {
  absl::StatusOr<DiskChunkPage> page =
      disk_->List({.after = options.after,
                   .limit = options.limit,
                   .layout_fingerprint = options.layout_fingerprint,
                   .tenant = options.tenant});
  if (!page.ok()) return page.status();
  ListPage listed{.resume_after = page->resume_after};
  listed.chunks.reserve(page->chunks.size());
  for (const auto& [key, info] : page->chunks) listed.chunks.push_back({key, FromDisk(info)});
  return listed;
}

void DiskLowerTier::NoteLayout(const KvLayout& layout) {
  // Kept with or without a codec: Compress encodes chunks of any layout the disk keeps.
  if (absl::Status kept = disk_->KeepLayout(layout); !kept.ok()) {
    spdlog::warn("disk tier: chunks of layout {} cannot be encoded: {}", layout.DebugString(),
                 kept.ToString());
  }
  {
    absl::MutexLock lock(&checked_mu_);
    if (!checked_layouts_.insert(layout.Fingerprint()).second) return;
  }
  auto check = [&layout](std::string_view whose, const CodecChoice& encoding) {
    if (encoding.codec == nullptr) return;
    if (absl::Status s = encoding.codec->CheckParams(layout, encoding.params); !s.ok()) {
      spdlog::warn(
          "disk tier: {} codec {} refuses layout {}: {}; such chunks are stored as they are", whose,
          encoding.codec->name(), layout.DebugString(), s.ToString());
    }
  };
  check("the", encoding_.codecs.fallback);
  for (const auto& [tenant, encoding] : encoding_.codecs.tenants) {
    check(fmt::format("tenant '{}''s", tenant), encoding);
  }
}

absl::StatusOr<LowerTier::RecodeResult> DiskLowerTier::Recode(const ChunkKey& key,
                                                              const Recoding& recoding) {
  const std::optional<DiskChunkInfo> info = disk_->Lookup(key);
  if (!info.has_value()) return RecodeResult{.outcome = RecodeOutcome::kMissing};
  RecodeResult result{.outcome = RecodeOutcome::kAlreadyInForm,
                      .stored_bytes_before = info->payload_bytes,
                      .stored_bytes_after = info->payload_bytes};
  const bool encode = recoding.codec != nullptr;
  if (encode == info->encoding.encoded()) return result;
  std::shared_ptr<const KvLayout> layout = disk_->KeptLayout(key.layout_fingerprint());
  if (layout == nullptr && encode && recoding.layout != nullptr &&
      recoding.layout->Fingerprint() == key.layout_fingerprint()) {
    if (absl::Status s = disk_->KeepLayout(*recoding.layout); !s.ok()) return s;
    layout = disk_->KeptLayout(key.layout_fingerprint());
  }
  // The chunk as it decodes now.
  const LowerTier::ChunkInfo chunk_info = FromDisk(*info);
  if (encode &&
      (layout == nullptr || layout->chunk_bytes(info->num_tokens) != chunk_info.payload_bytes)) {
    result.outcome = RecodeOutcome::kNoLayout;
    return result;
  }
  // Staging buffers, kept for the next recoding or read: a chunk's worth of fresh pages costs
  // this machine more to fault in than the codec takes to encode them.
  AlignedBuffer chunk = TakeStaging(chunk_info.payload_bytes);
  AlignedBuffer decoded = encode ? TakeStaging(chunk_info.payload_bytes) : AlignedBuffer();
  absl::Cleanup keep = [&] {
    ReturnStaging(std::move(chunk));
    if (encode) ReturnStaging(std::move(decoded));
  };
  const std::span<std::byte> whole[] = {chunk.span().first(chunk_info.payload_bytes)};
  const MutableParts destination[] = {whole};
  absl::Status read = ReadBatch({&key, 1}, destination).front();
  if (read.code() == absl::StatusCode::kAborted) return RecodeResult{};  // gone meanwhile
  if (!read.ok()) return read;
  const std::span<const std::byte> plain[] = {whole[0]};
  DiskPut put{.key = key,
              .layout_fingerprint = info->layout_fingerprint,
              .payload = plain,
              .payload_checksum = chunk_info.payload_checksum,
              .num_tokens = info->num_tokens,
              .tenant = info->tenant};
  std::optional<EncodedForm> encoded;
  if (encode) {
    const std::span<std::byte> check = decoded.span().first(chunk_info.payload_bytes);
    absl::StatusOr<std::optional<EncodedForm>> frame =
        EncodeChunk(*recoding.codec, recoding.params, *layout, info->num_tokens, whole[0], check);
    if (!frame.ok()) {
      return Annotate(frame.status(),
                      fmt::format("codec {} on {} (layout {})", recoding.codec->name(),
                                  key.ToString(), layout->DebugString()));
    }
    if (!frame->has_value()) {
      result.outcome = RecodeOutcome::kNotSmaller;
      return result;
    }
    encoded = **std::move(frame);
    result.error = CompareKv(layout->dtype, whole[0], check);
    put.payload = {&encoded->part, 1};
    put.payload_checksum = ChecksumBytes(encoded->frame);
    put.encoding = encoded->encoding;
    KeepError(result.error, put.encoding);
  }
  absl::StatusOr<bool> replaced = disk_->Replace(put, *info);
  if (!replaced.ok()) return replaced.status();
  if (!*replaced) return RecodeResult{};
  result.outcome = RecodeOutcome::kRecoded;
  result.stored_bytes_after = PartsBytes(put.payload);
  return result;
}

std::vector<absl::Status> DiskLowerTier::PutBatch(std::span<const Put> puts) {
  std::vector<DiskPut> disk_puts;
  disk_puts.reserve(puts.size());
  std::vector<std::unique_ptr<EncodedForm>> encoded;  // stable addresses for the parts
  AlignedBuffer chunk;
  AlignedBuffer decoded;
  absl::Cleanup keep = [&] {
    for (AlignedBuffer* buffer : {&chunk, &decoded}) {
      if (buffer->size() > 0) ReturnStaging(std::move(*buffer));
    }
  };
  for (const Put& put : puts) {
    DiskPut disk_put{.key = put.key,
                     .layout_fingerprint = put.key.layout_fingerprint(),
                     .payload = put.payload,
                     .payload_checksum = put.payload_checksum,
                     .num_tokens = put.num_tokens,
                     .tenant = put.tenant};
    const CodecChoice& encoding = encoding_.codecs.For(put.tenant);
    const std::shared_ptr<const KvLayout> layout =
        encoding.codec == nullptr ? nullptr : disk_->KeptLayout(put.key.layout_fingerprint());
    if (layout != nullptr) {
      // Scratch kept across the batch and for the next (fresh pages cost more than encoding).
      const uint64_t bytes = layout->chunk_bytes(put.num_tokens);
      for (AlignedBuffer* buffer : {&chunk, &decoded}) {
        if (buffer->size() >= bytes) continue;
        if (buffer->size() > 0) ReturnStaging(std::move(*buffer));
        *buffer = TakeStaging(bytes);
      }
      if (std::optional<EncodedForm> frame =
              Encode(put, *layout, encoding, chunk.span(), decoded.span())) {
        const EncodedForm& kept =
            *encoded.emplace_back(std::make_unique<EncodedForm>(*std::move(frame)));
        disk_put.payload = {&kept.part, 1};
        disk_put.payload_checksum = ChecksumBytes(kept.frame);
        disk_put.encoding = kept.encoding;
      }
    }
    disk_puts.push_back(disk_put);
  }
  return disk_->PutBatch(disk_puts);
}

std::vector<absl::Status> DiskLowerTier::ReadBatch(std::span<const ChunkKey> keys,
                                                   std::span<const MutableParts> destinations) {
  if (keys.size() != destinations.size()) return disk_->ReadBatch(keys, destinations);
  // Encoded chunks are read into staging buffers of their stored size and decoded from there,
  // kEncodedReadWindow at a time: the decodes of one window run on the pool while the next is
  // read.
  std::vector<std::optional<DiskChunkInfo>> infos(keys.size());
  std::vector<AlignedBuffer> staging(keys.size());  // returned to the kept ones at the end
  std::vector<std::span<std::byte>> staged_parts(keys.size());
  std::vector<size_t> plain;    // read straight into their destinations, first, in one batch
  std::vector<size_t> encoded;  // read through staging, in windows
  for (size_t i = 0; i < keys.size(); ++i) {
    infos[i] = disk_->Lookup(keys[i]);
    if (!infos[i].has_value() || !infos[i]->encoding.encoded()) {
      plain.push_back(i);
      continue;
    }
    encoded.push_back(i);
    staging[i] = TakeStaging(infos[i]->payload_bytes);
    staged_parts[i] = staging[i].span().first(infos[i]->payload_bytes);
  }
  std::vector<absl::Status> statuses(keys.size());
  TaskPool::Batch decodes(decoders_);
  // Reads keys[i] for each i of `indices` in one disk batch, settles each one's status, and
  // queues the decode of each encoded one that read.
  auto read = [&](std::span<const size_t> indices) {
    std::vector<ChunkKey> read_keys;
    std::vector<MutableParts> targets;
    for (size_t i : indices) {
      read_keys.push_back(keys[i]);
      targets.push_back(infos[i].has_value() && infos[i]->encoding.encoded()
                            ? MutableParts(&staged_parts[i], 1)
                            : destinations[i]);
    }
    std::vector<absl::Status> read_statuses = disk_->ReadBatch(read_keys, targets);
    for (size_t k = 0; k < indices.size(); ++k) {
      const size_t i = indices[k];
      statuses[i] = Settle(keys[i], infos[i], destinations[i], std::move(read_statuses[k]));
      if (!statuses[i].ok() || !infos[i].has_value() || !infos[i]->encoding.encoded()) continue;
      decodes.Run([this, &statuses, &keys, &infos, &staged_parts, destinations, i] {
        statuses[i] = DecodeInto(keys[i], *infos[i], staged_parts[i], destinations[i]);
      });
    }
  };
  if (!plain.empty()) read(plain);
  for (size_t first = 0; first < encoded.size(); first += kEncodedReadWindow) {
    read(std::span<const size_t>(encoded).subspan(
        first, std::min(kEncodedReadWindow, encoded.size() - first)));
    if (decoders_.threads() == 0) decodes.Wait();
  }
  decodes.Wait();
  for (size_t i : encoded) ReturnStaging(std::move(staging[i]));
  return statuses;
}

absl::Status DiskLowerTier::Settle(const ChunkKey& key, const std::optional<DiskChunkInfo>& info,
                                   MutableParts destination, absl::Status read) const {
  if (!info.has_value()) return read;
  uint64_t wanted = 0;
  for (std::span<std::byte> part : destination) wanted += part.size();
  const LowerTier::ChunkInfo chunk = FromDisk(*info);
  if (wanted != chunk.payload_bytes) {
    return absl::InvalidArgumentError(fmt::format(
        "disk tier: destination of {} bytes for a {}-byte chunk", wanted, chunk.payload_bytes));
  }
  if (read.code() == absl::StatusCode::kInvalidArgument) {
    // The record changed between the lookup and the read: the caller looks again.
    return absl::AbortedError(
        fmt::format("disk tier: {} changed while it was read", key.ToString()));
  }
  return read;
}

absl::Status DiskLowerTier::DecodeInto(const ChunkKey& key, const DiskChunkInfo& info,
                                       std::span<const std::byte> frame, MutableParts destination) {
  const std::shared_ptr<const KvLayout> layout = disk_->KeptLayout(key.layout_fingerprint());
  absl::StatusOr<const Codec*> codec =
      CodecRegistry::Find(static_cast<CodecId>(info.encoding.codec));
  absl::Status status = layout == nullptr ? absl::DataLossError("its layout is not kept")
                        : !codec.ok()     ? codec.status()
                                          : DecodeChunk(**codec, *layout, info.num_tokens,
                                                        info.encoding, frame, destination);
  if (!status.ok()) {
    // Never wrong bytes: the chunk goes (unless it was replaced meanwhile), and the engine
    // recomputes it.
    (void)disk_->DropCorrupt(key, info);
    return absl::DataLossError(
        fmt::format("disk tier: {} does not decode: {}", key.ToString(), status.ToString()));
  }
  return absl::OkStatus();
}

AlignedBuffer DiskLowerTier::TakeStaging(uint64_t bytes) {
  {
    absl::MutexLock lock(&staging_mu_);
    for (auto it = staging_.begin(); it != staging_.end(); ++it) {
      if (it->size() < bytes) continue;
      AlignedBuffer buffer = std::move(*it);
      staging_.erase(it);
      return buffer;
    }
  }
  return AlignedBuffer(bytes);
}

void DiskLowerTier::ReturnStaging(AlignedBuffer buffer) {
  absl::MutexLock lock(&staging_mu_);
  if (staging_.size() < kKeptStagingBuffers) {
    staging_.push_back(std::move(buffer));
    return;
  }
  // Full: keep the larger one, so that the kept ones fit the largest chunks.
  auto smallest = std::min_element(
      staging_.begin(), staging_.end(),
      [](const AlignedBuffer& a, const AlignedBuffer& b) { return a.size() < b.size(); });
  if (smallest->size() < buffer.size()) *smallest = std::move(buffer);
}

absl::StatusOr<RemoveResult> DiskLowerTier::RemoveIf(
    absl::FunctionRef<bool(const ChunkKey&)> predicate) {
  absl::StatusOr<DiskTier::RemovedChunks> removed = disk_->RemoveIf(predicate);
  if (!removed.ok()) return removed.status();
  return RemoveResult{.chunks = removed->chunks, .bytes = removed->payload_bytes};
}

LowerTierStats DiskLowerTier::Stats() const {
  const DiskTierStats disk = disk_->stats();
  return {.tier = Tier::kDisk,
          .capacity_bytes = disk.capacity_bytes,
          .used_bytes = disk.used_bytes(),
          .payload_bytes = disk.decoded_bytes,
          .stored_bytes = disk.payload_bytes,
          .encoded_chunks = disk.encoded_chunks,
          .chunks = disk.chunks,
          .reads = disk.reads,
          .read_bytes = disk.read_bytes,
          .writes = disk.writes,
          .written_bytes = disk.written_bytes,
          .evictions = disk.evictions,
          .corrupt_evictions = disk.dropped_records,
          .checksum_failures = disk.checksum_failures,
          .io_errors = disk.io_errors};
}

}  // namespace strata::storage
