// Layer streams between two in-process daemons over UCX (tcp on lo): A writes chunks into
// reserved pages layer by layer and streams them (LayerStreamSender), B reads each layer as it is
// announced (LayerStreamReceiver, through its RemoteServer) and commits what checks out. Also
// what must commit nothing: a corrupted read, an abort, a deadline, a pusher that dies, and
// malformed or out-of-place messages.
#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <optional>
#include <thread>
#include <vector>

#include "absl/synchronization/notification.h"
#include "storage/host/payload_view.h"
#include "storage/host/test_util.h"
#include "storage/remote/layer_stream_sender.h"
#include "storage/remote/remote_messages.h"
#include "storage/remote/testing/test_daemon.h"

namespace strata::storage::remote {
namespace {

using namespace std::chrono_literals;
using testing::TestDaemon;

// 4 layers, 64 tokens of 512 bytes: 32 KiB chunks over 4 KiB pages, each layer 8 KiB.
std::shared_ptr<const KvLayout> StreamLayout() {
  KvLayout layout = storage::testing::SmallLayout("stream-test");
  layout.num_layers = 4;
  layout.chunk_tokens = 64;
  return std::make_shared<const KvLayout>(layout);
}

// A chunk A's "engine" writes: its reservation on A and the bytes it will hold.
struct Written {
  ChunkKey key;
  uint32_t num_tokens = 0;
  WriteReservation reservation;
  std::vector<std::byte> bytes;
};

class LayerStreamTest : public ::testing::Test {
 protected:
  void Start(TestDaemon::Options b_options = {}) {
    a_ = std::make_unique<TestDaemon>(TestDaemon::Options{.node_id = "a"}, layout_);
    b_options.node_id = "b";
    b_options.dial = {a_->address()};
    b_ = std::make_unique<TestDaemon>(b_options, layout_);
    // Both sides admit the link (B answers A's calls only then) before anything is streamed.
    std::optional<PeerId> peer = a_->WaitForPeer("b");
    ASSERT_TRUE(peer.has_value());
    ASSERT_TRUE(b_->WaitForPeer("a").has_value());
    to_b_ = *peer;
    sender_ = std::make_unique<LayerStreamSender>(a_->transport(), LayerStreamSenderOptions{});
  }

  // Reserves chunk `id` (of `tokens` tokens) on A, nothing written yet.
  Written Reserve(uint64_t id, uint32_t tokens = 64) {
    Written chunk{.key = storage::testing::SyntheticKey(*layout_, id), .num_tokens = tokens};
    auto reserved = a_->store().host().Reserve(*layout_, chunk.key, {.num_tokens = tokens});
    EXPECT_TRUE(reserved.ok()) << reserved.status();
    chunk.reservation = std::move(reserved->reservation);
    chunk.bytes = storage::testing::Pattern(id, layout_->chunk_bytes(tokens));
    return chunk;
  }

  static PushedChunk Describe(const Written& chunk) {
    PushedChunk pushed{
        .key = chunk.key,
        .chunk = {.payload_bytes = chunk.bytes.size(), .num_tokens = chunk.num_tokens}};
    for (const ArenaRange& range : chunk.reservation.ranges()) {
      pushed.ranges.push_back({.offset = range.offset, .length = range.size_bytes});
    }
    return pushed;
  }

  uint64_t OpenStream(const std::vector<Written>& chunks) {
    std::vector<PushedChunk> pushed;
    for (const Written& chunk : chunks) pushed.push_back(Describe(chunk));
    return sender_->Open(to_b_, *layout_, std::move(pushed), 1000ms);
  }

  // Writes layer `layer` of every chunk into its pages on A, as an engine's save does.
  void WriteLayer(std::vector<Written>& chunks, uint32_t layer) {
    for (Written& chunk : chunks) {
      const uint64_t layer_bytes = layout_->layer_bytes(chunk.num_tokens);
      uint64_t offset = 0;  // of the current page range in the payload
      const MutablePayloadView pages = chunk.reservation.payload();
      for (size_t r = 0; r < pages.ranges().size(); ++r) {
        const std::span<std::byte> range = pages.range_bytes(r);
        for (uint64_t i = 0; i < range.size(); ++i) {
          if ((offset + i) / layer_bytes == layer) range[i] = chunk.bytes[offset + i];
        }
        offset += range.size();
      }
    }
  }

  void WriteAllLayers(std::vector<Written>& chunks) {
    for (uint32_t layer = 0; layer < layout_->num_layers; ++layer) WriteLayer(chunks, layer);
  }

  static std::vector<uint64_t> Checksums(const std::vector<Written>& chunks) {
    std::vector<uint64_t> checksums;
    for (const Written& chunk : chunks) checksums.push_back(ChecksumBytes(chunk.bytes));
    return checksums;
  }

  absl::StatusOr<std::vector<absl::Status>> Commit(uint64_t stream,
                                                   std::vector<uint64_t> checksums) {
    absl::Notification done;
    absl::StatusOr<std::vector<absl::Status>> result;
    sender_->Commit(stream, std::move(checksums), [&](auto chunks) {
      result = std::move(chunks);
      done.Notify();
    });
    EXPECT_TRUE(done.WaitForNotificationWithTimeout(absl::Seconds(20)));
    return result;
  }

  // Whether B holds `chunk`, byte for byte.
  bool BHolds(const Written& chunk) {
    auto lease = b_->store().host().AcquireForCopy(chunk.key, 1s);
    if (!lease.ok() || !lease->has_value()) return false;
    std::vector<std::byte> bytes((*lease)->size_bytes());
    (*lease)->payload().CopyTo(bytes);
    return bytes == chunk.bytes;
  }

  // Waits until `predicate` holds of B's stream stats, up to 10 s.
  template <class Predicate>
  bool WaitForB(Predicate predicate) {
    for (int i = 0; i < 1000; ++i) {
      if (predicate(b_->server().StreamStats())) return true;
      std::this_thread::sleep_for(10ms);
    }
    return false;
  }

  uint64_t BReservedBytes() { return b_->store().host().Stats().reserved_bytes; }

  std::shared_ptr<const KvLayout> layout_ = StreamLayout();
  // Declared first: destroyed after the daemons, whose transports answer its calls until then.
  std::unique_ptr<LayerStreamSender> sender_;
  std::unique_ptr<TestDaemon> a_;
  std::unique_ptr<TestDaemon> b_;
  PeerId to_b_ = 0;
};

TEST_F(LayerStreamTest, LayersMoveAsTheyAreWrittenAndCommitByteExact) {
  Start();
  std::vector<Written> chunks;
  chunks.push_back(Reserve(1));
  chunks.push_back(Reserve(2));
  chunks.push_back(Reserve(3, 40));  // a partial last chunk
  const uint64_t stream = OpenStream(chunks);
  uint64_t announced = 0;
  for (uint32_t layer = 0; layer < layout_->num_layers; ++layer) {
    WriteLayer(chunks, layer);
    sender_->LayersReady(stream, layer + 1);
    for (const Written& chunk : chunks) announced += layout_->layer_bytes(chunk.num_tokens);
    // B reads each layer once it is announced, before anything is committed.
    ASSERT_TRUE(WaitForB([&](const LayerStreamStats& s) { return s.bytes_received == announced; }))
        << "layer " << layer;
    EXPECT_EQ(b_->server().StreamStats().chunks_received, 0u);
  }
  // Open on both sides (`strata peers` lists them) until committed.
  EXPECT_EQ(sender_->OpenStreams(), (absl::flat_hash_map<PeerId, uint32_t>{{to_b_, 1}}));
  const absl::flat_hash_map<PeerId, uint32_t> into_b = b_->server().OpenStreamsIn();
  ASSERT_EQ(into_b.size(), 1u);
  EXPECT_EQ(into_b.begin()->second, 1u);
  auto result = Commit(stream, Checksums(chunks));
  ASSERT_TRUE(result.ok()) << result.status();
  ASSERT_EQ(result->size(), 3u);
  for (size_t i = 0; i < chunks.size(); ++i) {
    EXPECT_TRUE((*result)[i].ok()) << (*result)[i];
    EXPECT_TRUE(BHolds(chunks[i])) << i;
  }
  for (int i = 0; i < 1000 && !sender_->OpenStreams().empty(); ++i)
    std::this_thread::sleep_for(1ms);
  EXPECT_TRUE(sender_->OpenStreams().empty());
  EXPECT_TRUE(b_->server().OpenStreamsIn().empty());
  const LayerStreamStats stats = b_->server().StreamStats();
  EXPECT_EQ(stats.streams_opened, 1u);
  EXPECT_EQ(stats.chunks_received, 3u);
  EXPECT_EQ(stats.chunks_failed, 0u);
  EXPECT_EQ(BReservedBytes(), 0u);
}

TEST_F(LayerStreamTest, CommitReadsTheLayersNeverAnnounced) {
  Start();
  std::vector<Written> chunks;
  chunks.push_back(Reserve(4));
  const uint64_t stream = OpenStream(chunks);
  WriteAllLayers(chunks);
  sender_->LayersReady(stream, 1);
  auto result = Commit(stream, Checksums(chunks));
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_TRUE((*result)[0].ok()) << (*result)[0];
  EXPECT_TRUE(BHolds(chunks[0]));
}

TEST_F(LayerStreamTest, AChunkTheReceiverHoldsIsDeclinedAndTheRestArrive) {
  Start();
  std::vector<Written> chunks;
  chunks.push_back(Reserve(5));
  chunks.push_back(Reserve(6));
  {
    auto held = b_->store().host().Reserve(*layout_, chunks[0].key, {.num_tokens = 64});
    ASSERT_TRUE(held.ok());
    held->reservation.payload().CopyFrom(chunks[0].bytes);
    ASSERT_TRUE(b_->store().host().Commit(std::move(held->reservation)).ok());
  }
  const uint64_t stream = OpenStream(chunks);
  WriteAllLayers(chunks);
  sender_->LayersReady(stream, layout_->num_layers);
  auto result = Commit(stream, Checksums(chunks));
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ((*result)[0].code(), absl::StatusCode::kAlreadyExists);
  EXPECT_TRUE((*result)[1].ok()) << (*result)[1];
  EXPECT_TRUE(BHolds(chunks[1]));
}

TEST_F(LayerStreamTest, ACorruptedReadIsDataLossAndNothingOfItCommits) {
  Start({.faulty = true});
  // B's first read (chunk 7's layers 0-1) arrives with a flipped byte.
  b_->faults().AddRule({.kind = FaultKind::kCorrupt, .requests = RequestKind::kRead, .count = 1});
  std::vector<Written> chunks;
  chunks.push_back(Reserve(7));
  chunks.push_back(Reserve(8));
  const uint64_t stream = OpenStream(chunks);
  WriteAllLayers(chunks);
  sender_->LayersReady(stream, 2);
  auto result = Commit(stream, Checksums(chunks));
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(b_->faults().counts().corrupted, 1u);
  EXPECT_EQ((*result)[0].code(), absl::StatusCode::kDataLoss) << (*result)[0];
  EXPECT_TRUE((*result)[1].ok()) << (*result)[1];
  EXPECT_FALSE(b_->store().host().Contains(chunks[0].key));
  EXPECT_TRUE(BHolds(chunks[1]));
  EXPECT_EQ(b_->server().StreamStats().chunks_failed, 1u);
  EXPECT_EQ(BReservedBytes(), 0u);
}

TEST_F(LayerStreamTest, AWrongChecksumIsDataLoss) {
  Start();
  std::vector<Written> chunks;
  chunks.push_back(Reserve(9));
  const uint64_t stream = OpenStream(chunks);
  WriteAllLayers(chunks);
  auto result = Commit(stream, {Checksums(chunks)[0] ^ 1});
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ((*result)[0].code(), absl::StatusCode::kDataLoss);
  EXPECT_FALSE(b_->store().host().Contains(chunks[0].key));
}

TEST_F(LayerStreamTest, AnAbortedStreamCommitsNothingAndGivesItsPagesBack) {
  Start();
  std::vector<Written> chunks;
  chunks.push_back(Reserve(10));
  chunks.push_back(Reserve(11));
  const uint64_t stream = OpenStream(chunks);
  WriteLayer(chunks, 0);
  sender_->LayersReady(stream, 1);
  ASSERT_TRUE(WaitForB([](const LayerStreamStats& s) { return s.bytes_received > 0; }));
  EXPECT_GT(BReservedBytes(), 0u);
  sender_->Abort(stream);
  ASSERT_TRUE(WaitForB([](const LayerStreamStats& s) { return s.streams_aborted == 1; }));
  EXPECT_EQ(BReservedBytes(), 0u);
  for (const Written& chunk : chunks) EXPECT_FALSE(b_->store().host().Contains(chunk.key));
  // The stream is gone on both sides: a late commit is refused here, not sent.
  auto result = Commit(stream, Checksums(chunks));
  EXPECT_EQ(result.status().code(), absl::StatusCode::kFailedPrecondition) << result.status();
}

TEST_F(LayerStreamTest, AStreamPastItsDeadlineEndsAndItsCommitFails) {
  Start({.stream_deadline = 300ms});
  std::vector<Written> chunks;
  chunks.push_back(Reserve(12));
  const uint64_t stream = OpenStream(chunks);
  WriteLayer(chunks, 0);
  sender_->LayersReady(stream, 1);
  ASSERT_TRUE(WaitForB([](const LayerStreamStats& s) { return s.streams_expired == 1; }));
  EXPECT_EQ(BReservedBytes(), 0u);
  for (uint32_t layer = 1; layer < layout_->num_layers; ++layer) WriteLayer(chunks, layer);
  auto result = Commit(stream, Checksums(chunks));
  EXPECT_EQ(result.status().code(), absl::StatusCode::kFailedPrecondition) << result.status();
  EXPECT_FALSE(b_->store().host().Contains(chunks[0].key));
}

TEST_F(LayerStreamTest, APusherThatDiesMidStreamLeavesNothingOnTheReceiver) {
  Start();
  std::vector<Written> chunks;
  chunks.push_back(Reserve(13));
  const uint64_t stream = OpenStream(chunks);
  WriteLayer(chunks, 0);
  sender_->LayersReady(stream, 1);
  ASSERT_TRUE(WaitForB([](const LayerStreamStats& s) { return s.bytes_received > 0; }));
  chunks.clear();  // A's reservations go before A does
  a_.reset();
  ASSERT_TRUE(WaitForB([](const LayerStreamStats& s) { return s.streams_cut == 1; }));
  EXPECT_EQ(BReservedBytes(), 0u);
  EXPECT_EQ(b_->store().host().Stats().chunks, 0u);
}

// A decoder's lookup waits for the chunks a stream is bringing in: until the stream commits, or
// for its budget at most; a chunk no stream brings is not waited for.
TEST_F(LayerStreamTest, WaitersForIncomingChunksGoOnceTheStreamSettlesOrTheirBudgetEnds) {
  Start();
  std::vector<Written> chunks;
  chunks.push_back(Reserve(15));
  const ChunkKey elsewhere = storage::testing::SyntheticKey(*layout_, 99);
  EXPECT_FALSE(b_->server().AwaitIncoming({elsewhere}, 5s, [] { ADD_FAILURE() << "ran"; }));
  const uint64_t stream = OpenStream(chunks);
  ASSERT_TRUE(WaitForB([](const LayerStreamStats& s) { return s.streams_opened == 1; }));

  absl::Notification settled;
  absl::Notification timed_out;
  const auto asked = std::chrono::steady_clock::now();
  ASSERT_TRUE(
      b_->server().AwaitIncoming({elsewhere, chunks[0].key}, 10s, [&] { settled.Notify(); }));
  ASSERT_TRUE(b_->server().AwaitIncoming({chunks[0].key}, 100ms, [&] { timed_out.Notify(); }));
  ASSERT_TRUE(timed_out.WaitForNotificationWithTimeout(absl::Seconds(5)));
  EXPECT_GE(std::chrono::steady_clock::now() - asked, 100ms);
  EXPECT_FALSE(settled.HasBeenNotified());

  WriteAllLayers(chunks);
  auto result = Commit(stream, Checksums(chunks));
  ASSERT_TRUE(result.ok()) << result.status();
  ASSERT_TRUE(settled.WaitForNotificationWithTimeout(absl::Seconds(5)));
  EXPECT_TRUE(BHolds(chunks[0]));
  EXPECT_FALSE(b_->server().AwaitIncoming({chunks[0].key}, 5s, [] { ADD_FAILURE() << "ran"; }));
}

// Messages a pusher should never send: each is refused with its reason, and B keeps serving.
TEST_F(LayerStreamTest, MalformedAndOutOfPlaceMessagesAreRefused) {
  Start();
  auto call = [&](std::string message) {
    absl::Notification done;
    absl::StatusOr<std::string> reply;
    a_->transport().Call(to_b_, std::move(message), std::chrono::steady_clock::now() + 5s,
                         [&](absl::StatusOr<std::string> answer) {
                           reply = std::move(answer);
                           done.Notify();
                         });
    EXPECT_TRUE(done.WaitForNotificationWithTimeout(absl::Seconds(10)));
    return reply.status();
  };
  EXPECT_EQ(call(EncodeStreamLayers({.stream_id = 77, .layers_ready = 1})).code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(call(EncodeStreamCommit({.stream_id = 77, .checksums = {1}})).code(),
            absl::StatusCode::kFailedPrecondition);
  std::string truncated = EncodeStreamLayers({.stream_id = 1, .layers_ready = 1});
  truncated.pop_back();
  EXPECT_EQ(call(truncated).code(), absl::StatusCode::kInvalidArgument);
  // Aborting a stream that is not open is harmless.
  EXPECT_TRUE(call(EncodeStreamAbort({.stream_id = 78})).ok());

  std::vector<Written> chunks;
  chunks.push_back(Reserve(14));
  const uint64_t stream = OpenStream(chunks);
  // The sender numbers its streams from 1 on each link; B knows this one as (A's link, stream).
  EXPECT_EQ(call(EncodeStreamLayers({.stream_id = stream, .layers_ready = 99})).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(call(EncodeStreamCommit({.stream_id = stream, .checksums = {1, 2}})).code(),
            absl::StatusCode::kInvalidArgument);
  // A chunk whose size does not match its tokens is declined; the stream goes on.
  std::vector<PushedChunk> bad{Describe(chunks[0])};
  bad[0].chunk.payload_bytes += 1;
  const uint64_t bad_stream = sender_->Open(to_b_, *layout_, std::move(bad), 0ms);
  auto declined = Commit(bad_stream, {1});
  ASSERT_TRUE(declined.ok()) << declined.status();
  EXPECT_EQ((*declined)[0].code(), absl::StatusCode::kInvalidArgument);
  // And the good stream still commits.
  WriteAllLayers(chunks);
  auto result = Commit(stream, Checksums(chunks));
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_TRUE((*result)[0].ok()) << (*result)[0];
  EXPECT_TRUE(BHolds(chunks[0]));
  EXPECT_GE(b_->server().StreamStats().refused, 5u);
}

}  // namespace
}  // namespace strata::storage::remote
