// HostRuntime's DeviceStream::DecodeLayers: a codec's frame staged in "device" memory decodes
// layer by layer on the stream (the layers of one call side by side on its helpers), in order with
// its copies, into exactly what the codec's own DecodeLayer writes; a frame that does not decode
// fails only its decode, never the stream.
#include <atomic>
#include <cstring>
#include <string>
#include <vector>

#include "core/status_macros.h"
#include "gtest/gtest.h"
#include "storage/codec/codec_registry.h"
#include "storage/codec/encoded_chunk.h"
#include "storage/codec/testing/shaped_kv.h"
#include "storage/device/decode_check.h"
#include "storage/device/host_runtime.h"
#include "tests/support/test_layout.h"

namespace strata::storage {
namespace {

class HostRuntimeDecodeTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto stream = runtime_.CreateStream("decode");
    ASSERT_TRUE(stream.ok()) << stream.status();
    stream_ = *std::move(stream);
    const std::vector<std::byte> kv =
        testing::MakeKv(layout_, layout_.chunk_tokens, testing::KvShape::kShaped, 3);
    absl::StatusOr<std::vector<std::byte>> frame =
        codec_->Encode(layout_, layout_.chunk_tokens, kv, {});
    ASSERT_TRUE(frame.ok()) << frame.status();
    frame_ = *std::move(frame);
    head_.assign(frame_.begin(), frame_.begin() + EncodedFrameOverheadBytes(layout_.num_layers));
    auto staged = runtime_.Allocate(frame_.size(), MemoryKind::kDevice);
    ASSERT_TRUE(staged.ok());
    staged_ = *std::move(staged);
  }

  // The ops decoding every layer of the staged frame into `out` (layer_bytes each).
  DecodeLayerOp Op(uint32_t layer, std::vector<std::byte>& out, absl::Status& failure) const {
    return {.codec = codec_,
            .layout = &layout_,
            .frame = static_cast<const std::byte*>(staged_->data()),
            .frame_bytes = frame_.size(),
            .frame_head = head_,
            .layer = layer,
            .out = out.data(),
            .out_bytes = out.size(),
            .failure = &failure};
  }

  absl::Status Decode(const std::vector<DecodeLayerOp>& ops) { return stream_->DecodeLayers(ops); }

  std::vector<std::byte> Expected(uint32_t layer) const {
    std::vector<std::byte> out(layout_.layer_bytes(layout_.chunk_tokens));
    EXPECT_TRUE(codec_->DecodeLayer(layout_, frame_, layer, out).ok());
    return out;
  }

  const KvLayout layout_ = test_support::SmallLayout({.model_id = "decode-test",
                                                      .num_layers = 3,
                                                      .head_dim = 64,
                                                      .dtype = KvDtype::kBfloat16,
                                                      .chunk_tokens = 32});
  const Codec* const codec_ = *CodecRegistry::Find("int8");
  HostRuntime runtime_{{.copy_threads = 3}};  // two helpers decode beside the stream
  std::unique_ptr<DeviceStream> stream_;
  std::vector<std::byte> frame_;
  std::vector<std::byte> head_;  // the frame's header and layer table
  std::unique_ptr<DeviceAllocation> staged_;
};

TEST_F(HostRuntimeDecodeTest, DecodesEveryCodecLayerByLayerAfterTheFramesCopy) {
  for (const Codec* codec : CodecRegistry::All()) {
    EXPECT_TRUE(runtime_.DecodesOnDevice(codec->id())) << codec->name();
  }
  // The frame's copy into staging and the decodes that read it, in one stream, unsynchronized.
  const CopyRun copy{frame_.data(), staged_->data(), frame_.size()};
  ASSERT_TRUE(stream_->Copy({&copy, 1}).ok());
  std::vector<std::vector<std::byte>> out(
      layout_.num_layers, std::vector<std::byte>(layout_.layer_bytes(layout_.chunk_tokens)));
  std::vector<absl::Status> failures(layout_.num_layers);
  // Layer 0 alone, then the others in one call (on the stream's helpers).
  ASSERT_TRUE(Decode({Op(0, out[0], failures[0])}).ok());
  std::vector<DecodeLayerOp> rest;
  for (uint32_t l = 1; l < layout_.num_layers; ++l) rest.push_back(Op(l, out[l], failures[l]));
  ASSERT_TRUE(stream_->DecodeLayers(rest).ok());
  auto done = runtime_.CreateEvent();
  ASSERT_TRUE(done.ok());
  ASSERT_TRUE(stream_->Record(**done).ok());
  ASSERT_TRUE((*done)->Wait().ok());
  for (uint32_t l = 0; l < layout_.num_layers; ++l) {
    EXPECT_TRUE(failures[l].ok()) << failures[l];
    EXPECT_EQ(out[l], Expected(l)) << "layer " << l;
  }
}

TEST_F(HostRuntimeDecodeTest, AFrameThatDoesNotDecodeFailsOnlyItsDecode) {
  // One byte of the last layer's section changed: that layer's checksum fails.
  std::vector<std::byte> corrupt = frame_;
  corrupt[corrupt.size() - 5] ^= std::byte{0x40};
  const CopyRun copy{corrupt.data(), staged_->data(), corrupt.size()};
  ASSERT_TRUE(stream_->Copy({&copy, 1}).ok());
  std::vector<std::byte> first(layout_.layer_bytes(layout_.chunk_tokens));
  std::vector<std::byte> last(first.size());
  absl::Status first_failure;
  absl::Status last_failure;
  const DecodeLayerOp both[] = {Op(0, first, first_failure),
                                Op(layout_.num_layers - 1, last, last_failure)};
  ASSERT_TRUE(stream_->DecodeLayers(both).ok());
  // The stream goes on: a copy after the failed decode runs, and nothing is in error.
  std::vector<std::byte> after(64, std::byte{0});
  const std::vector<std::byte> source(64, std::byte{7});
  const CopyRun later{source.data(), after.data(), source.size()};
  ASSERT_TRUE(stream_->Copy({&later, 1}).ok());
  EXPECT_TRUE(stream_->Synchronize().ok());
  EXPECT_TRUE(first_failure.ok()) << first_failure;
  EXPECT_EQ(first, Expected(0));
  EXPECT_EQ(last_failure.code(), absl::StatusCode::kDataLoss) << last_failure;
  EXPECT_EQ(after, source);
}

TEST_F(HostRuntimeDecodeTest, AHeadThatIsNotTheFramesFailsItsDecode) {
  const CopyRun copy{frame_.data(), staged_->data(), frame_.size()};
  ASSERT_TRUE(stream_->Copy({&copy, 1}).ok());
  std::vector<std::vector<std::byte>> out(
      3, std::vector<std::byte>(layout_.layer_bytes(layout_.chunk_tokens)));
  std::vector<absl::Status> failures(3);
  std::vector<std::byte> other = head_;
  other[20] ^= std::byte{1};
  DecodeLayerOp wrong = Op(0, out[0], failures[0]);
  wrong.frame_head = other;
  DecodeLayerOp none = Op(1, out[1], failures[1]);  // no head: the host runtime needs none
  none.frame_head = {};
  const DecodeLayerOp right = Op(2, out[2], failures[2]);
  ASSERT_TRUE(stream_->DecodeLayers(std::vector{wrong, none, right}).ok());
  EXPECT_TRUE(stream_->Synchronize().ok());
  EXPECT_EQ(failures[0].code(), absl::StatusCode::kInvalidArgument) << failures[0];
  EXPECT_TRUE(failures[1].ok()) << failures[1];
  EXPECT_TRUE(failures[2].ok()) << failures[2];
  EXPECT_EQ(out[1], Expected(1));
  EXPECT_EQ(out[2], Expected(2));
}

TEST_F(HostRuntimeDecodeTest, BadOpsAreRefusedAndNothingIsEnqueued) {
  std::vector<std::byte> out(layout_.layer_bytes(layout_.chunk_tokens));
  absl::Status failure;
  DecodeLayerOp op = Op(0, out, failure);
  op.codec = nullptr;
  EXPECT_EQ(Decode({op}).code(), absl::StatusCode::kInvalidArgument);
  op = Op(layout_.num_layers, out, failure);
  EXPECT_EQ(Decode({op}).code(), absl::StatusCode::kInvalidArgument);
  op = Op(0, out, failure);
  op.out_bytes = layout_.layer_bytes(layout_.chunk_tokens) + 1;
  EXPECT_EQ(Decode({op}).code(), absl::StatusCode::kInvalidArgument);
  op.failure = nullptr;
  op.out_bytes = out.size();
  EXPECT_EQ(Decode({op}).code(), absl::StatusCode::kInvalidArgument);
  // One bad op refuses the whole call.
  std::vector<std::byte> untouched(out.size(), std::byte{0x7f});
  EXPECT_EQ(Decode({Op(0, untouched, failure), op}).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(stream_->Synchronize().ok());
  EXPECT_TRUE(failure.ok());
  EXPECT_EQ(untouched, std::vector<std::byte>(out.size(), std::byte{0x7f}));
}

// int8, but its first DecodeLayer flips a bit: that decode (the runtime's) disagrees with the next.
class DisagreeingCodec final : public Codec {
 public:
  CodecId id() const override { return inner_.id(); }
  std::string_view error_bound() const override { return inner_.error_bound(); }
  absl::StatusOr<std::vector<std::byte>> Encode(const KvLayout& layout, uint32_t num_tokens,
                                                std::span<const std::byte> payload,
                                                const CodecParams& params) const override {
    return inner_.Encode(layout, num_tokens, payload, params);
  }
  absl::Status CheckParams(const KvLayout& layout, const CodecParams& params) const override {
    return inner_.CheckParams(layout, params);
  }
  absl::Status Decode(const KvLayout& layout, std::span<const std::byte> encoded,
                      std::span<std::byte> out) const override {
    return inner_.Decode(layout, encoded, out);
  }
  absl::Status DecodeLayer(const KvLayout& layout, std::span<const std::byte> encoded,
                           uint32_t layer, std::span<std::byte> out) const override {
    STRATA_RETURN_IF_ERROR(inner_.DecodeLayer(layout, encoded, layer, out));
    if (calls_.fetch_add(1) == 0) out[0] ^= std::byte{1};
    return absl::OkStatus();
  }

 private:
  const Codec& inner_ = **CodecRegistry::Find("int8");
  mutable std::atomic<uint64_t> calls_{0};
};

TEST(CheckDeviceDecodesTest, TheHostRuntimePassesEveryCodecAndADisagreeingDecoderIsLeftOut) {
  HostRuntime runtime({.copy_threads = 2});
  std::vector<std::string> failures;
  // Every codec that restores a chunk whole (a token-dropping codec never reaches a load).
  std::vector<const Codec*> restoring;
  for (const Codec* codec : CodecRegistry::All()) {
    if (!codec->drops_tokens()) restoring.push_back(codec);
  }
  const CodecSet passed = CheckDeviceDecodes(runtime, restoring, &failures);
  for (const Codec* codec : restoring) {
    EXPECT_TRUE(passed.Contains(static_cast<uint32_t>(codec->id()))) << codec->name();
  }
  EXPECT_TRUE(failures.empty()) << (failures.empty() ? "" : failures.front());

  const DisagreeingCodec disagreeing;
  const Codec* const codecs[] = {&disagreeing};
  EXPECT_TRUE(CheckDeviceDecodes(runtime, codecs, &failures).empty());
  ASSERT_EQ(failures.size(), 1u);
  EXPECT_NE(failures[0].find("int8"), std::string::npos) << failures[0];
  EXPECT_NE(failures[0].find("differs from the CPU decoder"), std::string::npos) << failures[0];
}

}  // namespace
}  // namespace strata::storage
