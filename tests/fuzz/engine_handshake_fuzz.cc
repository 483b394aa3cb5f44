// Fuzzes an engine session's handshake as the daemon runs it (daemon/engine_session.h:
// EngineSession::Handle over a TieredStore with a host tier): the requests a process that has
// only connected to the engine socket can send before it has a session, and a second handshake
// after it has one. engine_request_fuzz covers the framing and the request's proto conversions;
// this target drives the session's state behind them.
//
// Input: the byte stream an engine writes on its session socket, as in engine_request_fuzz
// (4-byte little-endian length, then an EngineRequest), split into frames in memory. It ends
// where the session server would close the session: a bad length prefix, a truncated frame, a
// frame that is not an EngineRequest, a reply that closes the session, or the first request
// after a successful handshake other than another handshake (those need the store's chunks and
// are not this target's).
//
// Invariants: every reply answers its request's id and none is deferred. Before a successful
// handshake, any other request is kFailedPrecondition with no body and closes the session. A
// handshake succeeds exactly when its protocol version is ENGINE_PROTOCOL_VERSION and its layout
// converts (proto/convert.h); then the reply attaches the arena, names this session and the
// layout's fingerprint, and the session is handshaken. A failed handshake answers the
// conversion's code (kFailedPrecondition for the version), attaches nothing and closes the
// session. A second handshake is kFailedPrecondition and leaves the session as it was.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>

#include "absl/status/status.h"
#include "core/frame_io.h"
#include "core/kv_layout.h"
#include "daemon/deferred_completions.h"
#include "daemon/engine_session.h"
#include "google/protobuf/stubs/logging.h"
#include "proto/convert.h"
#include "spdlog/spdlog.h"
#include "storage/tiered/host_forms.h"
#include "storage/tiered/tiered_store.h"
#include "strata/v1/engine.pb.h"
#include "tests/fuzz/fuzz_check.h"

namespace {

namespace v1 = strata::v1;
namespace daemon = strata::daemon;
namespace storage = strata::storage;

// Each successful handshake notes its layout with the store (TieredStore::NoteLayout), which
// keeps up to kMaxKnownLayouts and refuses handshakes of new ones beyond: a fresh store before
// that many keeps every valid handshake taken.
constexpr int kHandshakesPerStore = static_cast<int>(strata::storage::kMaxKnownLayouts);

struct Daemon {
  std::unique_ptr<storage::TieredStore> store;
  std::shared_ptr<daemon::DeferredCompletions> completions;
  int handshakes = 0;
  uint64_t next_session_id = 1;
};

Daemon& TheDaemon() {
  static Daemon d;
  if (d.store == nullptr || d.handshakes >= kHandshakesPerStore) {
    d.store.reset();
    absl::StatusOr<std::unique_ptr<storage::TieredStore>> store = storage::TieredStore::Create(
        {.host = {.capacity_bytes = 16 * 4096, .page_bytes = 4096, .arena_name = "fuzz-host"}});
    FUZZ_CHECK(store.ok());
    d.store = *std::move(store);
    d.handshakes = 0;
  }
  if (d.completions == nullptr) {
    absl::StatusOr<std::shared_ptr<daemon::DeferredCompletions>> completions =
        daemon::DeferredCompletions::Create();
    FUZZ_CHECK(completions.ok());
    d.completions = *std::move(completions);
  }
  return d;
}

absl::StatusCode CodeOf(const v1::EngineResponse& response) {
  return strata::FromProto(response.status()).code();
}

// What the daemon must answer to a first handshake: OK, or the reason it refuses it.
absl::Status ExpectedHandshake(const v1::HandshakeRequest& handshake) {
  if (handshake.protocol_version() != v1::ENGINE_PROTOCOL_VERSION) {
    return absl::FailedPreconditionError("protocol version");
  }
  return strata::FromProto(handshake.layout()).status();
}

// A refused request: the status given, no body, nothing attached.
void CheckRefused(const daemon::EngineSession::Reply& reply, absl::StatusCode code) {
  FUZZ_CHECK(CodeOf(reply.response) == code);
  FUZZ_CHECK(reply.response.body_case() == v1::EngineResponse::BODY_NOT_SET);
  FUZZ_CHECK(!reply.attach_arena_fd && reply.device_pool_fd == -1);
}

// Answers one request; false when the session is over for this target.
bool Serve(daemon::EngineSession& session, const storage::TieredStore& store,
           const v1::EngineRequest& request, int& handshakes) {
  const bool was_handshaken = session.handshaken();
  const bool is_handshake = request.body_case() == v1::EngineRequest::kHandshake;
  if (was_handshaken && !is_handshake) return false;
  const daemon::EngineSession::Reply reply = session.Handle(request);
  FUZZ_CHECK(reply.response.request_id() == request.request_id());
  FUZZ_CHECK(!reply.deferred);

  if (!is_handshake) {
    CheckRefused(reply, absl::StatusCode::kFailedPrecondition);
    FUZZ_CHECK(reply.close_after && !session.handshaken());
    return false;
  }
  if (was_handshaken) {
    CheckRefused(reply, absl::StatusCode::kFailedPrecondition);
    FUZZ_CHECK(!reply.close_after && session.handshaken());
    return true;
  }
  const absl::Status expected = ExpectedHandshake(request.handshake());
  if (!expected.ok()) {
    CheckRefused(reply, expected.code());
    FUZZ_CHECK(reply.close_after && !session.handshaken());
    return false;
  }
  FUZZ_CHECK(CodeOf(reply.response) == absl::StatusCode::kOk);
  FUZZ_CHECK(reply.attach_arena_fd && !reply.close_after && session.handshaken());
  FUZZ_CHECK(reply.response.body_case() == v1::EngineResponse::kHandshake);
  const v1::HandshakeResponse& body = reply.response.handshake();
  FUZZ_CHECK(body.session_id() == session.id());
  FUZZ_CHECK(body.protocol_version() == v1::ENGINE_PROTOCOL_VERSION);
  FUZZ_CHECK(body.layout_fingerprint() ==
             strata::FromProto(request.handshake().layout())->Fingerprint());
  FUZZ_CHECK(body.arena_size_bytes() == store.host().arena_size_bytes());
  FUZZ_CHECK(body.page_bytes() == store.host().page_bytes());
  FUZZ_CHECK(session.engine_id() == request.handshake().engine_id());
  ++handshakes;
  return true;
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int* /*argc*/, char*** /*argv*/) {
  // Protobuf logs every string field with invalid UTF-8 it rejects; the parse failing is enough.
  google::protobuf::SetLogHandler(nullptr);
  spdlog::set_level(spdlog::level::off);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  Daemon& d = TheDaemon();
  daemon::EngineSession session(d.next_session_id++,
                                {.store = d.store.get(), .completions = d.completions}, {});
  size_t at = 0;
  while (size - at >= 4) {
    uint32_t length = 0;
    std::memcpy(&length, data + at, sizeof(length));
    at += 4;
    // The frame reader closes the session on these (engine_request_fuzz checks it does).
    if (length == 0 || length > strata::kMaxFrameBytes || length > size - at) break;
    v1::EngineRequest request;
    if (!request.ParseFromArray(data + at, static_cast<int>(length))) break;
    at += length;
    if (!Serve(session, *d.store, request, d.handshakes)) break;
  }
  return 0;
}
