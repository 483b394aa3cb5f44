// The device's fp16 / bf16 conversions agree bit for bit with the host helpers in kernels/dtype.h
// (the CPU references and the CUDA kernels round the same way).
#include <bit>
#include <cmath>
#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/cuda/device.h"
#include "kernels/cuda/gpu_test_util.h"
#include "kernels/dtype.h"

namespace strata::kernels::cuda {
namespace {

using testing::ToDevice;
using testing::ToHost;

TEST(DtypeGpuTest, DecodesEvery16BitPatternLikeTheHost) {
  STRATA_SKIP_WITHOUT_CUDA();
  std::vector<uint16_t> all(65536);
  for (uint32_t i = 0; i < 65536; ++i) all[i] = static_cast<uint16_t>(i);
  DeviceBuffer in = ToDevice(all);
  for (KvDtype dtype : {KvDtype::kBfloat16, KvDtype::kFloat16}) {
    auto out = DeviceBuffer::Allocate(65536 * sizeof(float));
    ASSERT_TRUE(out.ok());
    ASSERT_TRUE(cuda::CastToFloat(in.data(), dtype, out->as<float>(), 65536).ok());
    const std::vector<float> got = ToHost<float>(*out, 65536);
    for (uint32_t i = 0; i < 65536; ++i) {
      const float want = dtype == KvDtype::kBfloat16 ? Bf16BitsToFloat(static_cast<uint16_t>(i))
                                                     : Fp16BitsToFloat(static_cast<uint16_t>(i));
      if (std::isnan(want)) {
        ASSERT_TRUE(std::isnan(got[i]));
      } else {
        ASSERT_EQ(std::bit_cast<uint32_t>(got[i]), std::bit_cast<uint32_t>(want)) << i;
      }
    }
  }
}

TEST(DtypeGpuTest, RoundsFloatsLikeTheHost) {
  STRATA_SKIP_WITHOUT_CUDA();
  std::mt19937_64 rng(1);
  std::uniform_int_distribution<uint32_t> bits;
  std::vector<float> values;
  for (int i = 0; i < 1 << 20; ++i) {
    uint32_t u = bits(rng);
    if (i % 3 == 1) u = (u & 0x8fffffffu) | 0x38000000u;  // the fp16 range
    if (i % 3 == 2) u = (u & 0xffffe000u) | 0x1000u;      // exact fp16 ties
    values.push_back(std::bit_cast<float>(u));
  }
  values.push_back(65519.0f);
  values.push_back(65520.0f);
  values.push_back(5.9604644775390625e-8f);
  values.push_back(2.98023223876953125e-8f);
  DeviceBuffer in = ToDevice(values);
  auto out = DeviceBuffer::Allocate(values.size() * 2);
  ASSERT_TRUE(out.ok());
  for (KvDtype dtype : {KvDtype::kBfloat16, KvDtype::kFloat16}) {
    ASSERT_TRUE(
        cuda::CastFromFloat(in.as<float>(), dtype, out->data(), static_cast<int64_t>(values.size()))
            .ok());
    const std::vector<uint16_t> got = ToHost<uint16_t>(*out, values.size());
    for (size_t i = 0; i < values.size(); ++i) {
      if (std::isnan(values[i])) continue;  // NaN payloads may differ
      const uint16_t want =
          dtype == KvDtype::kBfloat16 ? FloatToBf16Bits(values[i]) : FloatToFp16Bits(values[i]);
      ASSERT_EQ(got[i], want) << "value " << values[i] << " dtype " << DtypeName(dtype);
    }
  }
}

TEST(DtypeGpuTest, ReportsDeviceErrorsAndRejectsBadCasts) {
  STRATA_SKIP_WITHOUT_CUDA();
  DeviceBuffer word = testing::ErrorWord();
  EXPECT_TRUE(cuda::ReadDeviceErrors(word.as<uint32_t>(), nullptr).ok());
  const uint32_t bits = kDeviceErrorBlockId | kDeviceErrorPosition;
  ASSERT_TRUE(word.CopyFromHost(&bits, sizeof(bits)).ok());
  const absl::Status s = cuda::ReadDeviceErrors(word.as<uint32_t>(), nullptr);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("block id"), std::string::npos);
  EXPECT_TRUE(cuda::ReadDeviceErrors(word.as<uint32_t>(), nullptr).ok());  // read clears it
  EXPECT_EQ(cuda::CastToFloat(nullptr, KvDtype::kBfloat16, word.as<float>(), 1).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(cuda::CastToFloat(word.data(), KvDtype::kInt8, word.as<float>(), 1).code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace strata::kernels::cuda
