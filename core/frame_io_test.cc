#include "core/frame_io.h"

#include <fcntl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <thread>

#include "gtest/gtest.h"

namespace strata {
namespace {

using std::chrono::milliseconds;

struct SocketPair {
  SocketPair() {
    int fds[2];
    EXPECT_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds), 0);
    a.Reset(fds[0]);
    b.Reset(fds[1]);
  }
  ScopedFd a, b;
};

TEST(FrameIo, RoundTripWithPassedFds) {
  SocketPair pair;
  int pipe_fds[2];
  ASSERT_EQ(pipe(pipe_fds), 0);
  ScopedFd read_end(pipe_fds[0]), write_end(pipe_fds[1]);
  int other_pipe[2];
  ASSERT_EQ(pipe(other_pipe), 0);
  ScopedFd other_read(other_pipe[0]), other_write(other_pipe[1]);
  const int two[] = {write_end.get(), other_write.get()};
  ASSERT_TRUE(SendFrame(pair.a.get(), "hello", milliseconds(100), two).ok());
  ASSERT_TRUE(SendFrame(pair.a.get(), "second", milliseconds(100)).ok());
  absl::StatusOr<ReceivedFrame> first = RecvFrame(pair.b.get(), milliseconds(100));
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_EQ(first->payload, "hello");
  ASSERT_EQ(first->passed_fds.size(), 2u);
  // The passed descriptors are working duplicates of the pipes' write ends, in order.
  ASSERT_EQ(write(first->passed_fds[0].get(), "x", 1), 1);
  ASSERT_EQ(write(first->passed_fds[1].get(), "y", 1), 1);
  char c = 0;
  ASSERT_EQ(read(read_end.get(), &c, 1), 1);
  EXPECT_EQ(c, 'x');
  ASSERT_EQ(read(other_read.get(), &c, 1), 1);
  EXPECT_EQ(c, 'y');
  absl::StatusOr<ReceivedFrame> second = RecvFrame(pair.b.get(), milliseconds(100));
  ASSERT_TRUE(second.ok());
  EXPECT_EQ(second->payload, "second");
  EXPECT_TRUE(second->passed_fds.empty());

  const int too_many[kMaxPassedFds + 1] = {};
  EXPECT_EQ(SendFrame(pair.a.get(), "x", milliseconds(100), too_many).code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(FrameIo, LargeFrameAcrossPartialWrites) {
  SocketPair pair;
  const std::string big(3u << 20, 'z');
  std::thread sender([&] { EXPECT_TRUE(SendFrame(pair.a.get(), big, milliseconds(2000)).ok()); });
  absl::StatusOr<ReceivedFrame> got = RecvFrame(pair.b.get(), milliseconds(2000));
  sender.join();
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(got->payload, big);
}

TEST(FrameIo, RejectsBadSizesAndTimesOut) {
  SocketPair pair;
  EXPECT_EQ(SendFrame(pair.a.get(), "", milliseconds(10)).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(SendFrame(pair.a.get(), std::string(kMaxFrameBytes + 1, 'a'), milliseconds(10)).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(RecvFrame(pair.b.get(), milliseconds(20)).status().code(),
            absl::StatusCode::kDeadlineExceeded);
  const char oversized[4] = {0, 0, 0, 0x7f};
  ASSERT_EQ(write(pair.a.get(), oversized, 4), 4);
  EXPECT_EQ(RecvFrame(pair.b.get(), milliseconds(100)).status().code(),
            absl::StatusCode::kInvalidArgument);
}

// Spinning only changes how the wait is spent: a frame that arrives during the spin, one that
// arrives after it (the wait falls back to sleeping), a spin longer than the timeout (the timeout
// still bounds the call) and a peer that closes mid-spin all come out as without it.
TEST(FrameIo, SpinningReceiveKeepsTheSameOutcomes) {
  using std::chrono::microseconds;
  SocketPair pair;
  std::thread early([&] { EXPECT_TRUE(SendFrame(pair.a.get(), "early", milliseconds(100)).ok()); });
  absl::StatusOr<ReceivedFrame> got =
      RecvFrame(pair.b.get(), milliseconds(1000), milliseconds(500));
  early.join();
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(got->payload, "early");

  std::thread late([&] {
    std::this_thread::sleep_for(milliseconds(30));
    EXPECT_TRUE(SendFrame(pair.a.get(), "late", milliseconds(100)).ok());
  });
  got = RecvFrame(pair.b.get(), milliseconds(1000), microseconds(200));
  late.join();
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(got->payload, "late");

  const auto start = std::chrono::steady_clock::now();
  EXPECT_EQ(RecvFrame(pair.b.get(), milliseconds(20), milliseconds(5000)).status().code(),
            absl::StatusCode::kDeadlineExceeded);
  EXPECT_LT(std::chrono::steady_clock::now() - start, milliseconds(2000));

  std::thread closer([&] {
    std::this_thread::sleep_for(milliseconds(5));
    pair.a.Reset();
  });
  EXPECT_EQ(RecvFrame(pair.b.get(), milliseconds(1000), milliseconds(500)).status().code(),
            absl::StatusCode::kUnavailable);
  closer.join();
}

TEST(FrameIo, ClosedPeerIsUnavailable) {
  SocketPair pair;
  pair.a.Reset();
  EXPECT_EQ(RecvFrame(pair.b.get(), milliseconds(100)).status().code(),
            absl::StatusCode::kUnavailable);
  EXPECT_EQ(SendFrame(pair.b.get(), "x", milliseconds(100)).code(), absl::StatusCode::kUnavailable);
}

TEST(FrameReader, ReassemblesSplitAndBatchedFrames) {
  SocketPair pair;
  ASSERT_EQ(fcntl(pair.b.get(), F_SETFL, O_NONBLOCK), 0);
  FrameReader reader;
  // Half a header, then the rest plus a whole second frame.
  const std::string wire =
      std::string("\x03\x00\x00\x00", 4) + "abc" + std::string("\x02\x00\x00\x00", 4) + "de";
  ASSERT_EQ(write(pair.a.get(), wire.data(), 2), 2);
  ASSERT_TRUE(reader.ReadAvailable(pair.b.get()).ok());
  EXPECT_EQ(*reader.Next(), std::nullopt);
  ASSERT_EQ(write(pair.a.get(), wire.data() + 2, wire.size() - 2),
            static_cast<ssize_t>(wire.size() - 2));
  ASSERT_TRUE(reader.ReadAvailable(pair.b.get()).ok());
  EXPECT_EQ(*reader.Next(), "abc");
  EXPECT_EQ(*reader.Next(), "de");
  EXPECT_EQ(*reader.Next(), std::nullopt);
  EXPECT_EQ(reader.buffered_bytes(), 0u);
}

TEST(FrameReader, GarbageLengthAndTruncationAreReported) {
  SocketPair pair;
  ASSERT_EQ(fcntl(pair.b.get(), F_SETFL, O_NONBLOCK), 0);
  FrameReader reader;
  ASSERT_EQ(write(pair.a.get(), "\xff\xff\xff\xff", 4), 4);
  ASSERT_TRUE(reader.ReadAvailable(pair.b.get()).ok());
  EXPECT_EQ(reader.Next().status().code(), absl::StatusCode::kInvalidArgument);

  SocketPair pair2;
  ASSERT_EQ(fcntl(pair2.b.get(), F_SETFL, O_NONBLOCK), 0);
  FrameReader truncated;
  ASSERT_EQ(write(pair2.a.get(),
                  "\x10\x00\x00\x00"
                  "abc",
                  7),
            7);
  pair2.a.Reset();
  EXPECT_EQ(truncated.ReadAvailable(pair2.b.get()).code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(*truncated.Next(), std::nullopt);
  EXPECT_EQ(truncated.buffered_bytes(), 7u);
}

}  // namespace
}  // namespace strata
