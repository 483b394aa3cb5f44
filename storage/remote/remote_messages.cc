#include "storage/remote/remote_messages.h"

#include <optional>

#include "absl/status/status.h"
#include "fmt/format.h"
#include "storage/remote/internal/message_codec.h"

namespace strata::storage::remote {
namespace {

// Replies carry a type byte of their own (the request's with the high bit set), so a reply of
// another kind is never taken for one.
constexpr uint8_t kReplyBit = 0x80;

uint8_t TypeOf(RemoteMessage message) { return static_cast<uint8_t>(message); }
uint8_t ReplyTypeOf(RemoteMessage message) { return TypeOf(message) | kReplyBit; }

void WriteKey(ByteWriter& writer, const ChunkKey& key) {
  writer.U8(static_cast<uint8_t>(key.algorithm()));
  writer.U8(static_cast<uint8_t>(key.key_namespace()));
  writer.U64(key.layout_fingerprint());
  const std::span<const uint8_t> digest = key.digest();
  writer.String(std::string_view(reinterpret_cast<const char*>(digest.data()), digest.size()));
}

bool ReadKey(ByteReader& reader, ChunkKey& key) {
  uint8_t algorithm = 0;
  uint8_t key_namespace = 0;
  uint64_t fingerprint = 0;
  std::string digest;
  if (!reader.U8(algorithm) || !reader.U8(key_namespace) || !reader.U64(fingerprint) ||
      !reader.String(digest, ChunkKey::kMaxDigestBytes)) {
    return false;
  }
  const auto parsed_algorithm = static_cast<HashAlgorithm>(algorithm);
  if (parsed_algorithm != HashAlgorithm::kXxh3_128 &&
      parsed_algorithm != HashAlgorithm::kSha256Cbor) {
    return false;
  }
  const auto parsed_namespace = static_cast<KeyNamespace>(key_namespace);
  if (parsed_namespace != KeyNamespace::kPrefix &&
      parsed_namespace != KeyNamespace::kPositionIndependent) {
    return false;
  }
  if (digest.size() != DigestSizeBytes(parsed_algorithm)) return false;
  key = ChunkKey::FromParts(
      parsed_algorithm, parsed_namespace, fingerprint,
      std::span(reinterpret_cast<const uint8_t*>(digest.data()), digest.size()));
  return true;
}

void WriteKeys(ByteWriter& writer, const std::vector<ChunkKey>& keys) {
  writer.U32(static_cast<uint32_t>(keys.size()));
  for (const ChunkKey& key : keys) WriteKey(writer, key);
}

bool ReadKeys(ByteReader& reader, std::vector<ChunkKey>& keys) {
  uint32_t count = 0;
  // Every key takes at least 11 bytes: a bound on the count before allocating.
  if (!reader.U32(count) || count > kMaxChainChunks || count > reader.left() / 11) return false;
  keys.resize(count);
  for (ChunkKey& key : keys) {
    if (!ReadKey(reader, key)) return false;
  }
  return true;
}

void WriteChunk(ByteWriter& writer, const RemoteChunk& chunk) {
  writer.U64(chunk.payload_bytes);
  writer.U64(chunk.payload_checksum);
  writer.U32(chunk.num_tokens);
}

bool ReadChunk(ByteReader& reader, RemoteChunk& chunk) {
  return reader.U64(chunk.payload_bytes) && reader.U64(chunk.payload_checksum) &&
         reader.U32(chunk.num_tokens);
}

void WriteRanges(ByteWriter& writer, const std::vector<RemoteRange>& ranges) {
  writer.U32(static_cast<uint32_t>(ranges.size()));
  for (const RemoteRange& range : ranges) {
    writer.U64(range.offset);
    writer.U64(range.length);
  }
}

bool ReadRanges(ByteReader& reader, std::vector<RemoteRange>& ranges) {
  uint32_t count = 0;
  if (!reader.U32(count) || count > kMaxChunkRanges || count > reader.left() / 16) return false;
  ranges.resize(count);
  for (RemoteRange& range : ranges) {
    if (!reader.U64(range.offset) || !reader.U64(range.length)) return false;
  }
  return true;
}

void WriteLayout(ByteWriter& writer, const KvLayout& layout) {
  writer.String(layout.model_id);
  writer.U8(static_cast<uint8_t>(layout.kind));
  writer.U32(layout.num_layers);
  writer.U32(layout.num_kv_heads);
  writer.U32(layout.head_dim);
  writer.U8(static_cast<uint8_t>(layout.dtype));
  writer.U32(layout.tp_rank);
  writer.U32(layout.tp_world_size);
  writer.U8(static_cast<uint8_t>(layout.positional));
  writer.U32(layout.chunk_tokens);
}

bool ReadLayout(ByteReader& reader, KvLayout& layout) {
  uint8_t kind = 0;
  uint8_t dtype = 0;
  uint8_t positional = 0;
  if (!reader.String(layout.model_id, kMaxTextBytes) || !reader.U8(kind) ||
      !reader.U32(layout.num_layers) || !reader.U32(layout.num_kv_heads) ||
      !reader.U32(layout.head_dim) || !reader.U8(dtype) || !reader.U32(layout.tp_rank) ||
      !reader.U32(layout.tp_world_size) || !reader.U8(positional) ||
      !reader.U32(layout.chunk_tokens)) {
    return false;
  }
  absl::StatusOr<KvKind> parsed_kind = KvKindFromValue(kind);
  absl::StatusOr<KvDtype> parsed_dtype = KvDtypeFromValue(dtype);
  absl::StatusOr<PositionalFormat> parsed_positional = PositionalFormatFromValue(positional);
  if (!parsed_kind.ok() || !parsed_dtype.ok() || !parsed_positional.ok()) return false;
  layout.kind = *parsed_kind;
  layout.dtype = *parsed_dtype;
  layout.positional = *parsed_positional;
  return layout.Validate().ok();
}

}  // namespace

std::string EncodeQuery(const QueryRequest& request) {
  ByteWriter writer = internal::StartMessage(TypeOf(RemoteMessage::kQuery));
  WriteKeys(writer, request.chain);
  return writer.Take();
}

std::string EncodeQueryReply(const QueryReply& reply) {
  ByteWriter writer = internal::StartMessage(ReplyTypeOf(RemoteMessage::kQuery));
  writer.U32(static_cast<uint32_t>(reply.held.size()));
  for (const RemoteChunk& chunk : reply.held) WriteChunk(writer, chunk);
  return writer.Take();
}

std::string EncodeLease(const LeaseRequest& request) {
  ByteWriter writer = internal::StartMessage(TypeOf(RemoteMessage::kLease));
  WriteKeys(writer, request.keys);
  writer.U32(request.lease_ms);
  return writer.Take();
}

std::string EncodeLeaseReply(const LeaseReply& reply) {
  ByteWriter writer = internal::StartMessage(ReplyTypeOf(RemoteMessage::kLease));
  writer.U64(reply.lease_id);
  writer.U32(static_cast<uint32_t>(reply.chunks.size()));
  for (const LeasedChunk& leased : reply.chunks) {
    writer.I32(leased.code);
    if (leased.code != 0) continue;
    WriteChunk(writer, leased.chunk);
    WriteRanges(writer, leased.ranges);
  }
  return writer.Take();
}

std::string EncodeRelease(const ReleaseRequest& request) {
  ByteWriter writer = internal::StartMessage(TypeOf(RemoteMessage::kRelease));
  writer.U64(request.lease_id);
  return writer.Take();
}

absl::StatusOr<QueryRequest> DecodeQuery(std::string_view payload) {
  std::optional<ByteReader> reader = internal::OpenMessage(payload, TypeOf(RemoteMessage::kQuery));
  QueryRequest request;
  if (!reader || !ReadKeys(*reader, request.chain) || !reader->empty()) {
    return internal::Malformed("remote query");
  }
  return request;
}

absl::StatusOr<QueryReply> DecodeQueryReply(std::string_view payload) {
  std::optional<ByteReader> reader =
      internal::OpenMessage(payload, ReplyTypeOf(RemoteMessage::kQuery));
  QueryReply reply;
  uint32_t count = 0;
  // Each chunk is 20 bytes.
  if (!reader || !reader->U32(count) || count > kMaxChainChunks || count > reader->left() / 20) {
    return internal::Malformed("remote query reply");
  }
  reply.held.resize(count);
  for (RemoteChunk& chunk : reply.held) {
    if (!ReadChunk(*reader, chunk)) return internal::Malformed("remote query reply");
  }
  if (!reader->empty()) return internal::Malformed("remote query reply");
  return reply;
}

absl::StatusOr<LeaseRequest> DecodeLease(std::string_view payload) {
  std::optional<ByteReader> reader = internal::OpenMessage(payload, TypeOf(RemoteMessage::kLease));
  LeaseRequest request;
  if (!reader || !ReadKeys(*reader, request.keys) || !reader->U32(request.lease_ms) ||
      !reader->empty()) {
    return internal::Malformed("remote lease request");
  }
  return request;
}

absl::StatusOr<LeaseReply> DecodeLeaseReply(std::string_view payload) {
  std::optional<ByteReader> reader =
      internal::OpenMessage(payload, ReplyTypeOf(RemoteMessage::kLease));
  LeaseReply reply;
  uint32_t count = 0;
  if (!reader || !reader->U64(reply.lease_id) || !reader->U32(count) || count > kMaxChainChunks ||
      count > reader->left() / 4) {
    return internal::Malformed("remote lease reply");
  }
  reply.chunks.resize(count);
  for (LeasedChunk& leased : reply.chunks) {
    uint32_t code = 0;
    if (!reader->U32(code)) return internal::Malformed("remote lease reply");
    leased.code = static_cast<int32_t>(code);
    if (leased.code == 0 &&
        (!ReadChunk(*reader, leased.chunk) || !ReadRanges(*reader, leased.ranges))) {
      return internal::Malformed("remote lease reply");
    }
  }
  if (!reader->empty()) return internal::Malformed("remote lease reply");
  return reply;
}

absl::StatusOr<ReleaseRequest> DecodeRelease(std::string_view payload) {
  std::optional<ByteReader> reader =
      internal::OpenMessage(payload, TypeOf(RemoteMessage::kRelease));
  ReleaseRequest request;
  if (!reader || !reader->U64(request.lease_id) || !reader->empty()) {
    return internal::Malformed("remote release request");
  }
  return request;
}

std::string EncodePush(const PushRequest& request) {
  ByteWriter writer = internal::StartMessage(TypeOf(RemoteMessage::kPush));
  WriteLayout(writer, request.layout);
  writer.U32(static_cast<uint32_t>(request.chunks.size()));
  for (const PushedChunk& pushed : request.chunks) {
    WriteKey(writer, pushed.key);
    WriteChunk(writer, pushed.chunk);
    WriteRanges(writer, pushed.ranges);
  }
  return writer.Take();
}

std::string EncodePushReply(const PushReply& reply) {
  ByteWriter writer = internal::StartMessage(ReplyTypeOf(RemoteMessage::kPush));
  writer.U32(static_cast<uint32_t>(reply.codes.size()));
  for (int32_t code : reply.codes) writer.I32(code);
  return writer.Take();
}

absl::StatusOr<PushRequest> DecodePush(std::string_view payload) {
  std::optional<ByteReader> reader = internal::OpenMessage(payload, TypeOf(RemoteMessage::kPush));
  PushRequest request;
  uint32_t count = 0;
  // Every chunk takes at least 35 bytes (a key of 11, a description of 20, a range count).
  if (!reader || !ReadLayout(*reader, request.layout) || !reader->U32(count) ||
      count > kMaxChainChunks || count > reader->left() / 35) {
    return internal::Malformed("remote push");
  }
  const uint64_t fingerprint = request.layout.Fingerprint();
  request.chunks.resize(count);
  for (PushedChunk& pushed : request.chunks) {
    if (!ReadKey(*reader, pushed.key) || pushed.key.layout_fingerprint() != fingerprint ||
        !ReadChunk(*reader, pushed.chunk) || !ReadRanges(*reader, pushed.ranges)) {
      return internal::Malformed("remote push");
    }
  }
  if (!reader->empty()) return internal::Malformed("remote push");
  return request;
}

absl::StatusOr<PushReply> DecodePushReply(std::string_view payload) {
  std::optional<ByteReader> reader =
      internal::OpenMessage(payload, ReplyTypeOf(RemoteMessage::kPush));
  PushReply reply;
  uint32_t count = 0;
  if (!reader || !reader->U32(count) || count > kMaxChainChunks || count > reader->left() / 4) {
    return internal::Malformed("remote push reply");
  }
  reply.codes.resize(count);
  for (int32_t& code : reply.codes) {
    uint32_t value = 0;
    if (!reader->U32(value)) return internal::Malformed("remote push reply");
    code = static_cast<int32_t>(value);
  }
  if (!reader->empty()) return internal::Malformed("remote push reply");
  return reply;
}

}  // namespace strata::storage::remote
