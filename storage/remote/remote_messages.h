// The remote tier's messages between daemons (application messages of the peer protocol,
// peer_messages.h): a requester asks a peer which chunks of a chain it holds (Query), leases the
// ones it wants (Lease: the peer answers where their bytes lie in its arena), reads them itself
// with Transport::Read and lets the leases go (Release). The requester pulls: no peer ever writes
// into its memory, so a peer that dies or stalls mid-fetch cannot touch pages the requester has
// given back, and every chunk is checked against its checksum before it is committed.
//
// Encoding: core/byte_codec.h after the type byte; decoding is strict and bounded (at most
// kMaxChainChunks keys, kMaxChunkRanges ranges a chunk) so a hostile peer cannot make a daemon
// allocate. Pure functions; thread-safe.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "core/chunk_key.h"
#include "core/kv_layout.h"
#include "storage/remote/peer_messages.h"

namespace strata::storage::remote {

inline constexpr size_t kMaxChainChunks = 4096;
inline constexpr size_t kMaxChunkRanges = 1024;

enum class RemoteMessage : uint8_t {
  kQuery = kFirstApplicationMessage,
  kLease = kFirstApplicationMessage + 1,
  kRelease = kFirstApplicationMessage + 2,
  kPush = kFirstApplicationMessage + 3,
  kStreamOpen = kFirstApplicationMessage + 4,
  kStreamLayers = kFirstApplicationMessage + 5,
  kStreamCommit = kFirstApplicationMessage + 6,
  kStreamAbort = kFirstApplicationMessage + 7,
};

// What a peer knows of a chunk it holds.
struct RemoteChunk {
  uint64_t payload_bytes = 0;
  uint64_t payload_checksum = 0;  // xxh3-64
  uint32_t num_tokens = 0;
};

// "Which leading chunks of this chain do you hold?" The answer lists the leading run the peer
// holds, stopping at its first miss.
struct QueryRequest {
  std::vector<ChunkKey> chain;
};
struct QueryReply {
  std::vector<RemoteChunk> held;  // held[i] describes chain[i]
};

// "Lease these chunks for me to read." Each is answered alone; a chunk the peer no longer holds
// is kAborted.
struct LeaseRequest {
  std::vector<ChunkKey> keys;
  uint32_t lease_ms = 0;
};
struct RemoteRange {
  uint64_t offset = 0;  // in the peer's registered region
  uint64_t length = 0;
};
struct LeasedChunk {
  int32_t code = 0;  // absl::StatusCode; the fields below only when 0
  RemoteChunk chunk;
  std::vector<RemoteRange> ranges;  // the payload's bytes, in order
};
struct LeaseReply {
  uint64_t lease_id = 0;  // names every lease of the request, for Release
  std::vector<LeasedChunk> chunks;
};

struct ReleaseRequest {
  uint64_t lease_id = 0;
};

// "Take these chunks of `layout`: read them from my arena." The pusher holds them leased until
// the answer; the receiver reserves pages, reads, checks each checksum and commits. Each chunk is
// answered alone: OK (stored), kAlreadyExists (held already), or why it failed.
struct PushedChunk {
  ChunkKey key;
  RemoteChunk chunk;
  std::vector<RemoteRange> ranges;  // in the pusher's region
};
struct PushRequest {
  KvLayout layout;
  std::vector<PushedChunk> chunks;
};
struct PushReply {
  std::vector<int32_t> codes;  // absl::StatusCode per chunk
};

// A layer stream (disaggregated prefill, layer_stream_receiver.h): the pusher hands over chunks
// its engine is still writing, layer by layer. Open names the chunks (payload_checksum unknown
// yet, 0) and where their pages lie in the pusher's region; the receiver reserves pages and
// answers per chunk (OK: it will take it; kAlreadyExists: held already; or why not). Layers says
// that layers [0, layers_ready) of every chunk are in the pusher's pages: the receiver reads
// them. Commit gives each chunk's checksum (all its layers are written): the receiver reads what
// is left, checks and commits, and answers per chunk. Abort ends the stream; nothing of it is
// committed. A stream is named by the pusher's id for it on its link.
struct StreamOpen {
  uint64_t stream_id = 0;
  // Soft-pin each chunk this long once committed, so the decoder that loads it finds it.
  uint32_t hold_ms = 0;
  PushRequest chunks;
};
struct StreamLayers {
  uint64_t stream_id = 0;
  uint32_t layers_ready = 0;
};
struct StreamCommit {
  uint64_t stream_id = 0;
  std::vector<uint64_t> checksums;  // one per chunk of the Open, in order
};
struct StreamAbort {
  uint64_t stream_id = 0;
};
// The answer to Open and Commit: one code per chunk of the Open.
struct StreamReply {
  std::vector<int32_t> codes;  // absl::StatusCode
};

std::string EncodeQuery(const QueryRequest& request);
std::string EncodeQueryReply(const QueryReply& reply);
std::string EncodeLease(const LeaseRequest& request);
std::string EncodeLeaseReply(const LeaseReply& reply);
std::string EncodeRelease(const ReleaseRequest& request);
std::string EncodePush(const PushRequest& request);
std::string EncodePushReply(const PushReply& reply);

absl::StatusOr<QueryRequest> DecodeQuery(std::string_view payload);
absl::StatusOr<QueryReply> DecodeQueryReply(std::string_view payload);
absl::StatusOr<LeaseRequest> DecodeLease(std::string_view payload);
absl::StatusOr<LeaseReply> DecodeLeaseReply(std::string_view payload);
absl::StatusOr<ReleaseRequest> DecodeRelease(std::string_view payload);
// Also checks the layout (KvLayout::Validate) and that every key is of it.
absl::StatusOr<PushRequest> DecodePush(std::string_view payload);
absl::StatusOr<PushReply> DecodePushReply(std::string_view payload);

std::string EncodeStreamOpen(const StreamOpen& request);
std::string EncodeStreamLayers(const StreamLayers& request);
std::string EncodeStreamCommit(const StreamCommit& request);
std::string EncodeStreamAbort(const StreamAbort& request);
// `type` is the request answered: kStreamOpen or kStreamCommit.
std::string EncodeStreamReply(RemoteMessage type, const StreamReply& reply);
// Layers and Abort are answered with an empty payload once taken.
std::string EncodeStreamAck(RemoteMessage type);

// Open checks its chunks as DecodePush does.
absl::StatusOr<StreamOpen> DecodeStreamOpen(std::string_view payload);
absl::StatusOr<StreamLayers> DecodeStreamLayers(std::string_view payload);
absl::StatusOr<StreamCommit> DecodeStreamCommit(std::string_view payload);
absl::StatusOr<StreamAbort> DecodeStreamAbort(std::string_view payload);
absl::StatusOr<StreamReply> DecodeStreamReply(RemoteMessage type, std::string_view payload);
absl::Status DecodeStreamAck(RemoteMessage type, std::string_view payload);

}  // namespace strata::storage::remote
