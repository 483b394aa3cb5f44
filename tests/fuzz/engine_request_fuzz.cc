// Fuzzes what a daemon engine session parses from the bytes an engine sends: the frame stream
// (core/frame_io.h FrameReader, over a real socket pair as the session server reads it), each
// frame as a v1::EngineRequest, and the conversions EngineSession::Handle applies to the request
// before it touches the store (proto/convert.h: the handshake's KvLayout, packed KeyChains, the
// ChunkKeys of store items).
//
// Input: the byte stream an engine writes on its session socket (4-byte little-endian length,
// then the frame), cut off anywhere. Invariants: frames come out in order and account for every
// byte the reader consumed; a bad length prefix is kInvalidArgument and ends the stream; every
// conversion that succeeds survives a ToProto/FromProto round trip.
//
// EngineSession::Handle itself is not driven here yet (it needs a TieredStore behind it).
#include <fcntl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "core/chunk_key.h"
#include "core/frame_io.h"
#include "core/kv_layout.h"
#include "google/protobuf/stubs/logging.h"
#include "proto/convert.h"
#include "strata/v1/engine.pb.h"
#include "tests/fuzz/fuzz_check.h"

namespace v1 = strata::v1;

namespace {

// The largest chain a session accepts (EngineSessionLimits::max_items_per_request).
constexpr size_t kMaxItems = 65536;

void CheckChain(const v1::KeyChain& proto) {
  auto keys = strata::FromProto(proto, kMaxItems);
  if (!keys.ok()) {
    FUZZ_CHECK(keys.status().code() == absl::StatusCode::kInvalidArgument);
    return;
  }
  FUZZ_CHECK(keys->size() <= kMaxItems);
  if (keys->empty()) return;
  v1::KeyChain packed;
  if (!strata::ToProto(*keys, packed).ok()) return;  // keys of mixed algorithms or layouts
  auto again = strata::FromProto(packed, kMaxItems);
  FUZZ_CHECK(again.ok() && *again == *keys);
}

void CheckKey(const v1::ChunkKey& proto) {
  auto key = strata::FromProto(proto);
  if (!key.ok()) return;
  auto again = strata::FromProto(strata::ToProto(*key));
  FUZZ_CHECK(again.ok() && *again == *key);
}

void CheckRequest(const v1::EngineRequest& request) {
  switch (request.body_case()) {
    case v1::EngineRequest::kHandshake: {
      auto layout = strata::FromProto(request.handshake().layout());
      if (!layout.ok()) return;
      auto again = strata::FromProto(strata::ToProto(*layout));
      FUZZ_CHECK(again.ok() && *again == *layout);
      FUZZ_CHECK(again->Fingerprint() == layout->Fingerprint());
      return;
    }
    case v1::EngineRequest::kLookup:
      CheckChain(request.lookup().chain());
      return;
    case v1::EngineRequest::kPrepareLoad:
      CheckChain(request.prepare_load().chain());
      return;
    case v1::EngineRequest::kPrefetch:
      CheckChain(request.prefetch().chain());
      return;
    case v1::EngineRequest::kPrepareStore:
      for (const v1::StoreItem& item : request.prepare_store().items()) {
        CheckKey(item.key());
        if (item.has_parent()) CheckKey(item.parent());
      }
      return;
    default:
      return;
  }
}

void SetNonBlocking(int fd) { ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) | O_NONBLOCK); }

}  // namespace

// Protobuf logs every string field with invalid UTF-8 it rejects; the parse failing is enough.
extern "C" int LLVMFuzzerInitialize(int* /*argc*/, char*** /*argv*/) {
  google::protobuf::SetLogHandler(nullptr);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  int fds[2];
  FUZZ_CHECK(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds) == 0);
  strata::ScopedFd reader_fd(fds[0]);
  strata::ScopedFd writer_fd(fds[1]);
  SetNonBlocking(reader_fd.get());
  SetNonBlocking(writer_fd.get());

  strata::FrameReader reader;
  size_t written = 0;
  size_t framed = 0;  // bytes of the frames taken so far, length prefixes included
  bool closed = false;
  while (true) {
    while (written < size) {
      const ssize_t n = ::send(writer_fd.get(), data + written, size - written, MSG_NOSIGNAL);
      if (n <= 0) break;
      written += static_cast<size_t>(n);
    }
    if (written == size && !closed) {
      ::shutdown(writer_fd.get(), SHUT_WR);
      closed = true;
    }
    const absl::Status read = reader.ReadAvailable(reader_fd.get());
    FUZZ_CHECK(read.ok() || read.code() == absl::StatusCode::kUnavailable);
    while (true) {
      absl::StatusOr<std::optional<std::string>> frame = reader.Next();
      if (!frame.ok()) {
        FUZZ_CHECK(frame.status().code() == absl::StatusCode::kInvalidArgument);
        return 0;  // the session closes
      }
      if (!frame->has_value()) break;
      const std::string& payload = **frame;
      FUZZ_CHECK(!payload.empty() && payload.size() <= strata::kMaxFrameBytes);
      uint32_t length = 0;
      std::memcpy(&length, data + framed, sizeof(length));
      FUZZ_CHECK(length == payload.size());
      FUZZ_CHECK(std::memcmp(data + framed + 4, payload.data(), payload.size()) == 0);
      framed += 4 + payload.size();
      v1::EngineRequest request;
      if (request.ParseFromString(payload)) CheckRequest(request);
    }
    if (!read.ok()) break;  // the peer closed: every byte has been read
  }
  FUZZ_CHECK(framed + reader.buffered_bytes() == size);
  return 0;
}
