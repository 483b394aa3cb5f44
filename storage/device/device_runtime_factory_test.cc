#include "storage/device/device_runtime_factory.h"

#include "gtest/gtest.h"

namespace strata::storage {
namespace {

TEST(DeviceRuntimeFactoryTest, ParsesBackendNames) {
  EXPECT_EQ(*ParseDeviceBackend("auto"), DeviceBackend::kAuto);
  EXPECT_EQ(*ParseDeviceBackend("host"), DeviceBackend::kHost);
  EXPECT_EQ(*ParseDeviceBackend("cpu"), DeviceBackend::kHost);
  EXPECT_EQ(*ParseDeviceBackend("cuda"), DeviceBackend::kCuda);
  EXPECT_EQ(ParseDeviceBackend("rocm").status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_STREQ(DeviceBackendName(DeviceBackend::kCuda), "cuda");
}

TEST(DeviceRuntimeFactoryTest, HostBackendIsTheHostRuntime) {
  auto runtime = CreateDeviceRuntime({.backend = DeviceBackend::kHost});
  ASSERT_TRUE(runtime.ok()) << runtime.status();
  EXPECT_EQ((*runtime)->Capabilities().backend, "host");
  EXPECT_FALSE((*runtime)->Capabilities().device_memory);
}

TEST(DeviceRuntimeFactoryTest, AutoNeverFailsForWantOfAGpu) {
  auto runtime = CreateDeviceRuntime({.backend = DeviceBackend::kAuto});
  ASSERT_TRUE(runtime.ok()) << runtime.status();
  const std::string backend = (*runtime)->Capabilities().backend;
  EXPECT_TRUE(backend == "host" || backend == "cuda") << backend;
  if (!CudaRuntimeCompiled()) {
    EXPECT_EQ(backend, "host");
  }
}

TEST(DeviceRuntimeFactoryTest, ExplicitCudaFailsClearlyWhenUnavailable) {
  auto runtime = CreateDeviceRuntime({.backend = DeviceBackend::kCuda, .device_ordinal = 4096});
  ASSERT_FALSE(runtime.ok());
  EXPECT_EQ(runtime.status().code(), absl::StatusCode::kFailedPrecondition);
  if (!CudaRuntimeCompiled()) {
    EXPECT_NE(runtime.status().message().find("STRATA_WITH_CUDA"), absl::string_view::npos);
  }
}

}  // namespace
}  // namespace strata::storage
