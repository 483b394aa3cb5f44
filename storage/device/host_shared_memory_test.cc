// HostRuntime's shareable memory: what the daemon's device pool (T0) is on machines without a GPU.
#include <sys/mman.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <string>

#include "core/frame_io.h"
#include "gtest/gtest.h"
#include "storage/device/host_runtime.h"
#include "storage/device/testing/forked_child.h"

namespace strata::storage {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;

constexpr uint64_t kBytes = 1 << 20;

TEST(HostSharedMemoryTest, ASecondMappingOfTheHandleSeesTheSameBytes) {
  HostRuntime runtime;
  auto memory = runtime.AllocateShareable(kBytes, "strata-test-pool");
  ASSERT_TRUE(memory.ok()) << memory.status();
  const SharedMemoryHandle handle = (*memory)->handle();
  EXPECT_EQ(handle.backend, "host");
  EXPECT_EQ(handle.size_bytes, kBytes);
  ASSERT_GE(handle.fd, 0);
  EXPECT_EQ((*memory)->kind(), MemoryKind::kDevice);
  EXPECT_EQ((*memory)->size_bytes(), kBytes);

  auto opened = runtime.OpenShared(handle);
  ASSERT_TRUE(opened.ok()) << opened.status();
  ASSERT_NE((*opened)->data(), (*memory)->data());
  auto* mine = static_cast<unsigned char*>((*memory)->data());
  auto* theirs = static_cast<unsigned char*>((*opened)->data());
  mine[0] = 0x5a;
  mine[kBytes - 1] = 0xa5;
  EXPECT_EQ(theirs[0], 0x5a);
  EXPECT_EQ(theirs[kBytes - 1], 0xa5);
  theirs[4096] = 0x11;
  EXPECT_EQ(mine[4096], 0x11);

  // The opened mapping outlives the allocation that made the memory.
  memory->reset();
  EXPECT_EQ(theirs[0], 0x5a);
}

TEST(HostSharedMemoryTest, AnotherProcessMapsItFromADescriptorPassedOverASocket) {
  // The child is forked before the memory exists, so the descriptor it maps is the one it
  // receives, as an engine's is.
  testing::ForkedChild child([](int socket_fd) {
    HostRuntime runtime;
    auto frame = RecvFrame(socket_fd, milliseconds(10000));
    if (!frame.ok() || frame->passed_fds.size() != 1) return 2;
    SharedMemoryHandle handle;
    handle.backend = "host";
    handle.size_bytes = kBytes;
    handle.fd = frame->passed_fds[0].get();
    auto opened = runtime.OpenShared(handle);
    if (!opened.ok()) return 3;
    auto* bytes = static_cast<unsigned char*>((*opened)->data());
    for (uint64_t i = 0; i < kBytes / 2; ++i) {
      if (bytes[i] != static_cast<unsigned char>(i * 31 + 7)) return 4;
    }
    for (uint64_t i = kBytes / 2; i < kBytes; ++i) bytes[i] = static_cast<unsigned char>(i * 13);
    return SendFrame(socket_fd, "done", milliseconds(10000)).ok() ? 0 : 5;
  });
  ASSERT_TRUE(child.started());
  HostRuntime runtime;
  auto memory = runtime.AllocateShareable(kBytes, "strata-test-pool");
  ASSERT_TRUE(memory.ok()) << memory.status();
  auto* bytes = static_cast<unsigned char*>((*memory)->data());
  for (uint64_t i = 0; i < kBytes / 2; ++i) bytes[i] = static_cast<unsigned char>(i * 31 + 7);
  const int pool_fd[] = {(*memory)->handle().fd};
  ASSERT_TRUE(SendFrame(child.socket(), "pool", milliseconds(10000), pool_fd).ok());
  auto reply = RecvFrame(child.socket(), milliseconds(10000));
  ASSERT_TRUE(reply.ok()) << reply.status();
  EXPECT_EQ(child.Wait(seconds(10)), 0);
  for (uint64_t i = kBytes / 2; i < kBytes; ++i) {
    ASSERT_EQ(bytes[i], static_cast<unsigned char>(i * 13)) << i;
  }
}

TEST(HostSharedMemoryTest, BadRequestsAndHandlesAreInvalidArgument) {
  HostRuntime runtime;
  EXPECT_EQ(runtime.AllocateShareable(0, "empty").status().code(),
            absl::StatusCode::kInvalidArgument);
  auto memory = runtime.AllocateShareable(kBytes, "strata-test-pool");
  ASSERT_TRUE(memory.ok()) << memory.status();

  SharedMemoryHandle cuda = (*memory)->handle();
  cuda.backend = "cuda";
  EXPECT_EQ(runtime.OpenShared(cuda).status().code(), absl::StatusCode::kInvalidArgument);
  SharedMemoryHandle no_fd = (*memory)->handle();
  no_fd.fd = -1;
  EXPECT_EQ(runtime.OpenShared(no_fd).status().code(), absl::StatusCode::kInvalidArgument);
  SharedMemoryHandle empty = (*memory)->handle();
  empty.size_bytes = 0;
  EXPECT_EQ(runtime.OpenShared(empty).status().code(), absl::StatusCode::kInvalidArgument);
  SharedMemoryHandle too_large = (*memory)->handle();
  too_large.size_bytes = 2 * kBytes;
  const absl::Status refused = runtime.OpenShared(too_large).status();
  EXPECT_EQ(refused.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(refused.ToString().find("names only"), std::string::npos) << refused;
  // A descriptor that is not a file of shared memory.
  int pipe_fds[2];
  ASSERT_EQ(::pipe(pipe_fds), 0);
  SharedMemoryHandle a_pipe = (*memory)->handle();
  a_pipe.fd = pipe_fds[0];
  EXPECT_FALSE(runtime.OpenShared(a_pipe).ok());
  ::close(pipe_fds[0]);
  ::close(pipe_fds[1]);
}

}  // namespace
}  // namespace strata::storage
