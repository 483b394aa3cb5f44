#include "tests/support/raw_engine_client.h"

#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/un.h>

#include <cstring>
#include <utility>

#include "core/check.h"
#include "core/fmt_absl.h"
#include "core/frame_io.h"
#include "fmt/format.h"
#include "proto/convert.h"

namespace strata::test_support {

v1::EngineRequest LookupRequest(std::span<const ChunkKey> keys) {
  v1::EngineRequest request;
  STRATA_CHECK(ToProto(keys, *request.mutable_lookup()->mutable_chain()).ok());
  return request;
}

v1::EngineRequest PrepareLoadRequest(std::span<const ChunkKey> keys, uint32_t lease_ms) {
  v1::EngineRequest request;
  STRATA_CHECK(ToProto(keys, *request.mutable_prepare_load()->mutable_chain()).ok());
  request.mutable_prepare_load()->set_lease_ms(lease_ms);
  return request;
}

v1::EngineRequest PrefetchRequest(std::span<const ChunkKey> keys) {
  v1::EngineRequest request;
  STRATA_CHECK(ToProto(keys, *request.mutable_prefetch()->mutable_chain()).ok());
  return request;
}

using std::chrono::milliseconds;

RawEngineClient::RawEngineClient(const std::string& path) {
  fd_.Reset(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::strncpy(addr.sun_path, path.c_str(), sizeof(addr.sun_path) - 1);
  connected_ = ::connect(fd_.get(), reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0;
}

RawEngineClient::~RawEngineClient() {
  if (arena_ != nullptr) ::munmap(arena_, arena_size_);
}

absl::StatusOr<v1::EngineResponse> RawEngineClient::Call(v1::EngineRequest request) {
  if (absl::StatusOr<uint64_t> sent = Send(std::move(request)); !sent.ok()) return sent.status();
  return Receive();
}

absl::StatusOr<uint64_t> RawEngineClient::Send(v1::EngineRequest request) {
  request.set_request_id(++next_id_);
  std::string bytes;
  request.SerializeToString(&bytes);
  if (absl::Status s = SendFrame(fd_.get(), bytes, milliseconds(2000)); !s.ok()) return s;
  return request.request_id();
}

absl::StatusOr<v1::EngineResponse> RawEngineClient::Receive() {
  absl::StatusOr<ReceivedFrame> frame = RecvFrame(fd_.get(), milliseconds(5000));
  if (!frame.ok()) return frame.status();
  v1::EngineResponse response;
  if (!response.ParseFromString(frame->payload)) {
    return absl::InternalError("the daemon sent a frame that is not an EngineResponse");
  }
  if (!frame->passed_fds.empty() && response.has_handshake() && arena_ == nullptr) {
    arena_size_ = response.handshake().arena_size_bytes();
    void* p = ::mmap(nullptr, arena_size_, PROT_READ | PROT_WRITE, MAP_SHARED,
                     frame->passed_fds[0].get(), 0);
    if (p != MAP_FAILED) arena_ = static_cast<std::byte*>(p);
    if (frame->passed_fds.size() > 1) device_pool_fd_ = std::move(frame->passed_fds[1]);
  }
  return response;
}

absl::StatusOr<v1::EngineResponse> RawEngineClient::Handshake(const KvLayout& layout,
                                                              std::string engine_id) {
  v1::EngineRequest request;
  request.mutable_handshake()->set_protocol_version(v1::ENGINE_PROTOCOL_VERSION);
  request.mutable_handshake()->set_engine_id(std::move(engine_id));
  *request.mutable_handshake()->mutable_layout() = ToProto(layout);
  return Call(request);
}

absl::StatusOr<std::vector<uint64_t>> RawEngineClient::Store(const std::vector<ChunkKey>& keys,
                                                             uint32_t num_tokens, uint8_t fill,
                                                             bool commit, std::string_view tenant,
                                                             std::span<const uint32_t> chain_tokens,
                                                             uint32_t hold_ms) {
  v1::EngineRequest store;
  for (size_t i = 0; i < keys.size(); ++i) {
    v1::StoreItem* item = store.mutable_prepare_store()->add_items();
    *item->mutable_key() = ToProto(keys[i]);
    item->set_num_tokens(num_tokens);
    item->set_tenant(std::string(tenant));
    item->set_hold_ms(hold_ms);
    if (!chain_tokens.empty()) {
      if (i > 0) *item->mutable_parent() = ToProto(keys[i - 1]);
      const std::span<const uint32_t> tokens = chain_tokens.subspan(i * num_tokens, num_tokens);
      item->mutable_token_ids()->Add(tokens.begin(), tokens.end());
    }
  }
  absl::StatusOr<v1::EngineResponse> placed = Call(store);
  if (!placed.ok()) return placed.status();
  if (absl::Status s = FromProto(placed->status()); !s.ok()) return s;
  std::vector<uint64_t> handles;
  for (int i = 0; i < placed->prepare_store().chunks_size(); ++i) {
    const v1::StorePlacement& chunk = placed->prepare_store().chunks(i);
    if (absl::Status s = FromProto(chunk.status()); !s.ok()) return s;
    if (chunk.disposition() != v1::STORE_DISPOSITION_RESERVED) continue;
    for (const v1::Extent& extent : chunk.extents()) {
      std::memset(arena_ + extent.offset(), fill + i, extent.length());
    }
    handles.push_back(chunk.handle());
  }
  if (!commit || handles.empty()) return handles;
  v1::EngineRequest request;
  for (uint64_t handle : handles) request.mutable_commit()->add_handles(handle);
  absl::StatusOr<v1::EngineResponse> committed = Call(request);
  if (!committed.ok()) return committed.status();
  for (const v1::Status& status : committed->handles().statuses()) {
    if (absl::Status s = FromProto(status); !s.ok()) return s;
  }
  return handles;
}

}  // namespace strata::test_support
