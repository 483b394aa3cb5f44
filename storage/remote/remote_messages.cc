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

// A message that is only an id (Release's lease, Abort's stream).
std::string EncodeIdMessage(RemoteMessage type, uint64_t id) {
  ByteWriter writer = internal::StartMessage(TypeOf(type));
  writer.U64(id);
  return writer.Take();
}

std::optional<uint64_t> DecodeIdMessage(std::string_view payload, RemoteMessage type) {
  std::optional<ByteReader> reader = internal::OpenMessage(payload, TypeOf(type));
  uint64_t id = 0;
  if (!reader || !reader->U64(id) || !reader->empty()) return std::nullopt;
  return id;
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
  return EncodeIdMessage(RemoteMessage::kRelease, request.lease_id);
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
  const std::optional<uint64_t> lease_id = DecodeIdMessage(payload, RemoteMessage::kRelease);
  if (!lease_id.has_value()) return internal::Malformed("remote release request");
  return ReleaseRequest{.lease_id = *lease_id};
}

namespace {

void WritePushBody(ByteWriter& writer, const PushRequest& request) {
  WriteLayout(writer, request.layout);
  writer.U32(static_cast<uint32_t>(request.chunks.size()));
  for (const PushedChunk& pushed : request.chunks) {
    WriteKey(writer, pushed.key);
    WriteChunk(writer, pushed.chunk);
    WriteRanges(writer, pushed.ranges);
  }
}

bool ReadPushBody(ByteReader& reader, PushRequest& request) {
  uint32_t count = 0;
  // Every chunk takes at least 35 bytes (a key of 11, a description of 20, a range count).
  if (!ReadLayout(reader, request.layout) || !reader.U32(count) || count > kMaxChainChunks ||
      count > reader.left() / 35) {
    return false;
  }
  const uint64_t fingerprint = request.layout.Fingerprint();
  request.chunks.resize(count);
  for (PushedChunk& pushed : request.chunks) {
    if (!ReadKey(reader, pushed.key) || pushed.key.layout_fingerprint() != fingerprint ||
        !ReadChunk(reader, pushed.chunk) || !ReadRanges(reader, pushed.ranges)) {
      return false;
    }
  }
  return true;
}

void WriteCodes(ByteWriter& writer, const std::vector<int32_t>& codes) {
  writer.U32(static_cast<uint32_t>(codes.size()));
  for (int32_t code : codes) writer.I32(code);
}

bool ReadCodes(ByteReader& reader, std::vector<int32_t>& codes) {
  uint32_t count = 0;
  if (!reader.U32(count) || count > kMaxChainChunks || count > reader.left() / 4) return false;
  codes.resize(count);
  for (int32_t& code : codes) {
    uint32_t value = 0;
    if (!reader.U32(value)) return false;
    code = static_cast<int32_t>(value);
  }
  return true;
}

}  // namespace

std::string EncodePush(const PushRequest& request) {
  ByteWriter writer = internal::StartMessage(TypeOf(RemoteMessage::kPush));
  WritePushBody(writer, request);
  return writer.Take();
}

std::string EncodePushReply(const PushReply& reply) {
  ByteWriter writer = internal::StartMessage(ReplyTypeOf(RemoteMessage::kPush));
  WriteCodes(writer, reply.codes);
  return writer.Take();
}

absl::StatusOr<PushRequest> DecodePush(std::string_view payload) {
  std::optional<ByteReader> reader = internal::OpenMessage(payload, TypeOf(RemoteMessage::kPush));
  PushRequest request;
  if (!reader || !ReadPushBody(*reader, request) || !reader->empty()) {
    return internal::Malformed("remote push");
  }
  return request;
}

absl::StatusOr<PushReply> DecodePushReply(std::string_view payload) {
  std::optional<ByteReader> reader =
      internal::OpenMessage(payload, ReplyTypeOf(RemoteMessage::kPush));
  PushReply reply;
  if (!reader || !ReadCodes(*reader, reply.codes) || !reader->empty()) {
    return internal::Malformed("remote push reply");
  }
  return reply;
}

std::string EncodeStreamOpen(const StreamOpen& request) {
  ByteWriter writer = internal::StartMessage(TypeOf(RemoteMessage::kStreamOpen));
  writer.U64(request.stream_id);
  writer.U32(request.hold_ms);
  WritePushBody(writer, request.chunks);
  return writer.Take();
}

std::string EncodeStreamLayers(const StreamLayers& request) {
  ByteWriter writer = internal::StartMessage(TypeOf(RemoteMessage::kStreamLayers));
  writer.U64(request.stream_id);
  writer.U32(request.layers_ready);
  return writer.Take();
}

std::string EncodeStreamCommit(const StreamCommit& request) {
  ByteWriter writer = internal::StartMessage(TypeOf(RemoteMessage::kStreamCommit));
  writer.U64(request.stream_id);
  writer.U32(static_cast<uint32_t>(request.checksums.size()));
  for (uint64_t checksum : request.checksums) writer.U64(checksum);
  return writer.Take();
}

std::string EncodeStreamAbort(const StreamAbort& request) {
  return EncodeIdMessage(RemoteMessage::kStreamAbort, request.stream_id);
}

std::string EncodeStreamReply(RemoteMessage type, const StreamReply& reply) {
  ByteWriter writer = internal::StartMessage(ReplyTypeOf(type));
  WriteCodes(writer, reply.codes);
  return writer.Take();
}

std::string EncodeStreamAck(RemoteMessage type) {
  return internal::StartMessage(ReplyTypeOf(type)).Take();
}

absl::StatusOr<StreamOpen> DecodeStreamOpen(std::string_view payload) {
  std::optional<ByteReader> reader =
      internal::OpenMessage(payload, TypeOf(RemoteMessage::kStreamOpen));
  StreamOpen request;
  if (!reader || !reader->U64(request.stream_id) || !reader->U32(request.hold_ms) ||
      !ReadPushBody(*reader, request.chunks) || !reader->empty()) {
    return internal::Malformed("remote stream open");
  }
  return request;
}

absl::StatusOr<StreamLayers> DecodeStreamLayers(std::string_view payload) {
  std::optional<ByteReader> reader =
      internal::OpenMessage(payload, TypeOf(RemoteMessage::kStreamLayers));
  StreamLayers request;
  if (!reader || !reader->U64(request.stream_id) || !reader->U32(request.layers_ready) ||
      !reader->empty()) {
    return internal::Malformed("remote stream layers");
  }
  return request;
}

absl::StatusOr<StreamCommit> DecodeStreamCommit(std::string_view payload) {
  std::optional<ByteReader> reader =
      internal::OpenMessage(payload, TypeOf(RemoteMessage::kStreamCommit));
  StreamCommit request;
  uint32_t count = 0;
  if (!reader || !reader->U64(request.stream_id) || !reader->U32(count) ||
      count > kMaxChainChunks || count > reader->left() / 8) {
    return internal::Malformed("remote stream commit");
  }
  request.checksums.resize(count);
  for (uint64_t& checksum : request.checksums) {
    if (!reader->U64(checksum)) return internal::Malformed("remote stream commit");
  }
  if (!reader->empty()) return internal::Malformed("remote stream commit");
  return request;
}

absl::StatusOr<StreamAbort> DecodeStreamAbort(std::string_view payload) {
  const std::optional<uint64_t> stream_id = DecodeIdMessage(payload, RemoteMessage::kStreamAbort);
  if (!stream_id.has_value()) return internal::Malformed("remote stream abort");
  return StreamAbort{.stream_id = *stream_id};
}

absl::StatusOr<StreamReply> DecodeStreamReply(RemoteMessage type, std::string_view payload) {
  std::optional<ByteReader> reader = internal::OpenMessage(payload, ReplyTypeOf(type));
  StreamReply reply;
  if (!reader || !ReadCodes(*reader, reply.codes) || !reader->empty()) {
    return internal::Malformed("remote stream reply");
  }
  return reply;
}

absl::Status DecodeStreamAck(RemoteMessage type, std::string_view payload) {
  std::optional<ByteReader> reader = internal::OpenMessage(payload, ReplyTypeOf(type));
  if (!reader || !reader->empty()) return internal::Malformed("remote stream acknowledgement");
  return absl::OkStatus();
}

}  // namespace strata::storage::remote
