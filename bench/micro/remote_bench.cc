// remote_bench: fetching 32 MiB chunks from a peer daemon's memory over UcxTransport, against
// ucx_perftest and Redis measured in the same run (BASELINES.md). Prints one table.
//
// Peer. For each row the bench runs itself again with --serve=ROW in a child process: a
// UcxTransport over a 256 MiB region (eight 32 MiB chunks of a pattern that differs at every
// 8-byte word) listening on 127.0.0.1:0. The child writes its listen address on stdout and serves
// until its stdin, a pipe from the bench, closes. Every child (peer, ucx_perftest, redis-server)
// is killed when the bench dies (PR_SET_PDEATHSIG) and is otherwise stopped and reaped with
// bounded waits (SIGTERM, then SIGKILL).
//
// Strata. The client is a UcxTransport over a 128 MiB region: four 32 MiB slots. One fetch is
// one Read of a 32 MiB chunk (chunk i % 8 of the peer for the i-th fetch) as 16 segments of
// 2 MiB, the host arena's page size. Once the link is up and 4 untimed fetches have warmed it,
// two timed loops run: 1 fetch in flight, then 4 (each completion starts its slot's next fetch
// on the transport's progress thread). A loop stops after --iterations fetches or --seconds,
// whichever comes first. GB/s is bytes / 1e9 per second from the first Read to the last
// completion; latency is per fetch, from its Read to its completion. The row reports the faster
// loop. Before each loop the slots are zeroed; after it each slot is compared (memcmp) with the
// chunk it fetched last.
//
// Rows. tcp/am and tcp/rma: UCX_TLS tcp on lo. shm/rma and shm/am: posix,cma,tcp. Baseline:
// ucx_perftest between two processes with the same UCX_TLS and UCX_NET_DEVICES, as many 32 MiB
// messages as the row's faster loop fetched (4 warm-up): ucp_am_bw for am rows, ucp_get for rma
// rows. The overall bandwidth of its "Final:" line is in MB/s of 2^20 bytes (its header is checked
// for the unit) and is converted to GB/s of 1e9 bytes. Target: strata / ucx_perftest >= 0.8.
//
// Redis. A redis-server without persistence on 127.0.0.1 holds one 32 MiB value; a minimal RESP
// client on one connection times GETs of it, one in flight, with the same bounds, and verifies
// the first. The faster tcp row is compared with it. Target: strata / redis >= 1.5.
//
// A baseline that cannot be measured (a tool missing, a tool failing) is reported in its row with
// the reason. Exit status: 0 when every Strata fetch completed and matched (missed targets
// included), 1 on a mismatch or a transport error, 2 on bad flags.
//
// Usage: remote_bench [--iterations=N] [--seconds=S] [--only=tcp|shm]
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <charconv>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "core/fmt_absl.h"
#include "core/scoped_fd.h"
#include "core/status_macros.h"
#include "core/status_util.h"
#include "fmt/format.h"
#include "storage/remote/ucx_transport.h"

extern char** environ;

namespace strata::bench {
namespace {

using storage::remote::DataPath;
using storage::remote::PeerId;
using storage::remote::RequestId;
using storage::remote::Segment;
using storage::remote::Transport;
using storage::remote::UcxTransport;
using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;

constexpr uint64_t kChunkBytes = 32ull << 20;
constexpr uint64_t kSegmentBytes = 2ull << 20;
constexpr uint64_t kSegmentsPerChunk = kChunkBytes / kSegmentBytes;
constexpr uint64_t kPeerChunks = 8;
constexpr int kMaxInFlight = 4;
constexpr uint64_t kWarmupFetches = 4;
// Bounds on waits for things that take milliseconds when they work.
constexpr auto kFetchTimeout = 10s;
constexpr auto kStartTimeout = 10s;
constexpr auto kStopGrace = 5s;

struct Flags {
  uint64_t iterations = 1000;  // fetches (or GETs) per timed loop, at most
  double seconds = 1.0;        // per timed loop, at most
  std::string only;            // "", "tcp" or "shm"
  std::string serve;           // internal: run as the peer of this row
};

struct Row {
  std::string_view name;
  std::string_view family;  // what --only selects
  std::string_view transports;
  std::string_view net_devices;
  DataPath data_path;
  std::string_view perftest_test;
};

constexpr std::array<Row, 4> kRows = {{
    {"tcp/am", "tcp", "tcp", "lo", DataPath::kActiveMessages, "ucp_am_bw"},
    {"tcp/rma", "tcp", "tcp", "lo", DataPath::kRma, "ucp_get"},
    {"shm/rma", "shm", "posix,cma,tcp", "", DataPath::kRma, "ucp_get"},
    {"shm/am", "shm", "posix,cma,tcp", "", DataPath::kActiveMessages, "ucp_am_bw"},
}};

const Row* FindRow(std::string_view name) {
  for (const Row& row : kRows) {
    if (row.name == name) return &row;
  }
  return nullptr;
}

double Seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

Clock::duration Duration(double seconds) {
  return std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
}

double Median(std::vector<double> values) {
  if (values.empty()) return 0;
  const auto middle = values.begin() + values.size() / 2;
  std::nth_element(values.begin(), middle, values.end());
  return *middle;
}

// --- The peer's bytes ----------------------------------------------------------------------------

// The pattern the peer's region holds: a distinct word at every 8-byte offset, so a misplaced
// segment cannot match.
void FillPattern(std::span<std::byte> bytes, uint64_t first_offset) {
  for (uint64_t i = 0; i + 8 <= bytes.size(); i += 8) {
    const uint64_t word = ((first_offset + i) / 8 + 1) * 0x9E3779B97F4A7C15ull;
    std::memcpy(bytes.data() + i, &word, sizeof(word));
  }
}

// kDataLoss naming the first differing byte when `got` is not `expected`.
absl::Status CompareBytes(std::span<const std::byte> got, std::span<const std::byte> expected,
                          std::string_view what) {
  if (std::memcmp(got.data(), expected.data(), expected.size()) == 0) return absl::OkStatus();
  const auto [at, unused] = std::mismatch(got.begin(), got.end(), expected.begin());
  return absl::DataLossError(
      fmt::format("{}: bytes differ from the source at offset {}", what, at - got.begin()));
}

// --- Processes -----------------------------------------------------------------------------------

std::optional<std::string> FindExecutable(std::string_view name) {
  const char* path = std::getenv("PATH");
  std::string_view dirs = path != nullptr ? path : "/usr/bin:/bin";
  while (!dirs.empty()) {
    const size_t colon = dirs.find(':');
    const std::string candidate = fmt::format("{}/{}", dirs.substr(0, colon), name);
    if (::access(candidate.c_str(), X_OK) == 0) return candidate;
    dirs = colon == std::string_view::npos ? std::string_view() : dirs.substr(colon + 1);
  }
  return std::nullopt;
}

absl::StatusOr<std::string> SelfPath() {
  std::array<char, 4096> buffer{};
  const ssize_t n = ::readlink("/proc/self/exe", buffer.data(), buffer.size() - 1);
  if (n <= 0) return ErrnoToStatus(errno, "readlink /proc/self/exe");
  return std::string(buffer.data(), static_cast<size_t>(n));
}

// This process's environment with UCX_TLS and UCX_NET_DEVICES set as `row` configures them (an
// empty setting is left unset).
std::vector<std::string> UcxEnvironment(const Row& row) {
  std::vector<std::string> env;
  for (char** entry = environ; *entry != nullptr; ++entry) {
    const std::string_view text = *entry;
    if (!text.starts_with("UCX_TLS=") && !text.starts_with("UCX_NET_DEVICES=")) {
      env.emplace_back(text);
    }
  }
  if (!row.transports.empty()) env.push_back(fmt::format("UCX_TLS={}", row.transports));
  if (!row.net_devices.empty()) env.push_back(fmt::format("UCX_NET_DEVICES={}", row.net_devices));
  return env;
}

std::vector<std::string> Environment() {
  std::vector<std::string> env;
  for (char** entry = environ; *entry != nullptr; ++entry) env.emplace_back(*entry);
  return env;
}

std::vector<char*> CStrings(const std::vector<std::string>& strings) {
  std::vector<char*> pointers;
  for (const std::string& s : strings) pointers.push_back(const_cast<char*>(s.c_str()));
  pointers.push_back(nullptr);
  return pointers;
}

struct Pipe {
  ScopedFd read;
  ScopedFd write;
};

absl::StatusOr<Pipe> MakePipe() {
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) return ErrnoToStatus(errno, "pipe2");
  return Pipe{ScopedFd(fds[0]), ScopedFd(fds[1])};
}

// Descriptors of ours that become a child's stdin, stdout and stderr; -1 is /dev/null.
struct Stdio {
  int in = -1;
  int out = -1;
  int err = STDERR_FILENO;
};

// A child process. It is killed when this process dies (PR_SET_PDEATHSIG), and stopped and
// reaped when the Child is destroyed. Move-only; not thread-safe.
class Child {
 public:
  static absl::StatusOr<Child> Spawn(const std::string& path, const std::vector<std::string>& args,
                                     const std::vector<std::string>& env, Stdio stdio) {
    const std::vector<char*> argv = CStrings(args);
    const std::vector<char*> envp = CStrings(env);
    ScopedFd null_fd(::open("/dev/null", O_RDWR | O_CLOEXEC));
    if (!null_fd.valid()) return ErrnoToStatus(errno, "open /dev/null");
    const int in = stdio.in >= 0 ? stdio.in : null_fd.get();
    const int out = stdio.out >= 0 ? stdio.out : null_fd.get();
    const int err = stdio.err >= 0 ? stdio.err : null_fd.get();
    const pid_t parent = ::getpid();
    const pid_t pid = ::fork();
    if (pid < 0) return ErrnoToStatus(errno, fmt::format("fork for {}", path));
    if (pid == 0) {
      // Async-signal-safe calls only, up to the exec.
      if (::prctl(PR_SET_PDEATHSIG, SIGKILL) != 0 || ::getppid() != parent) ::_exit(127);
      if (::dup2(in, 0) < 0 || ::dup2(out, 1) < 0 || ::dup2(err, 2) < 0) ::_exit(127);
      ::execve(path.c_str(), argv.data(), envp.data());
      ::_exit(127);
    }
    return Child(pid);
  }

  Child(Child&& other) noexcept : pid_(std::exchange(other.pid_, -1)) {}
  Child& operator=(Child&&) = delete;
  ~Child() { Stop(0ms); }

  // The exit code (128 + signal for a signal) once the child has exited, waiting up to `limit`;
  // nullopt while it runs.
  std::optional<int> WaitFor(Clock::duration limit) {
    if (pid_ <= 0) return exit_code_;
    const auto deadline = Clock::now() + limit;
    int status = 0;
    while (::waitpid(pid_, &status, WNOHANG) == 0) {
      if (Clock::now() >= deadline) return std::nullopt;
      std::this_thread::sleep_for(2ms);
    }
    pid_ = -1;
    exit_code_ = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    return exit_code_;
  }

  // SIGTERM, up to `grace` for the exit, then SIGKILL; reaps the child either way.
  void Stop(Clock::duration grace) {
    if (pid_ <= 0) return;
    ::kill(pid_, SIGTERM);
    if (WaitFor(grace)) return;
    ::kill(pid_, SIGKILL);
    ::waitpid(pid_, nullptr, 0);
    pid_ = -1;
  }

 private:
  explicit Child(pid_t pid) : pid_(pid) {}
  pid_t pid_ = -1;
  std::optional<int> exit_code_;
};

// What `fd` yields until EOF or until `enough` holds for it; kDeadlineExceeded at `deadline`.
absl::StatusOr<std::string> ReadOutput(int fd, Clock::time_point deadline,
                                       const std::function<bool(std::string_view)>& enough) {
  std::string text;
  while (!enough || !enough(text)) {
    const auto left = std::chrono::ceil<std::chrono::milliseconds>(deadline - Clock::now());
    pollfd poll_fd{.fd = fd, .events = POLLIN, .revents = 0};
    const int ready = left.count() > 0 ? ::poll(&poll_fd, 1, static_cast<int>(left.count())) : 0;
    if (ready < 0 && errno == EINTR) continue;
    if (ready < 0) return ErrnoToStatus(errno, "poll");
    if (ready == 0) return absl::DeadlineExceededError(fmt::format("no end of output: {}", text));
    std::array<char, 4096> buffer;
    const ssize_t n = ::read(fd, buffer.data(), buffer.size());
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return ErrnoToStatus(errno, "read");
    if (n == 0) break;
    text.append(buffer.data(), static_cast<size_t>(n));
  }
  return text;
}

// A port on 127.0.0.1 that nothing was bound to a moment ago.
absl::StatusOr<uint16_t> FreePort() {
  ScopedFd fd(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  sockaddr_in address{.sin_family = AF_INET, .sin_port = 0, .sin_addr = {htonl(INADDR_LOOPBACK)}};
  socklen_t length = sizeof(address);
  if (!fd.valid() || ::bind(fd.get(), reinterpret_cast<sockaddr*>(&address), length) != 0 ||
      ::getsockname(fd.get(), reinterpret_cast<sockaddr*>(&address), &length) != 0) {
    return ErrnoToStatus(errno, "find a free port");
  }
  return ntohs(address.sin_port);
}

// --- The peer ------------------------------------------------------------------------------------

// --serve=ROW: serves a 256 MiB patterned region until stdin closes. Returns the exit code.
int Serve(const Row& row) {
  std::vector<std::byte> region(kPeerChunks * kChunkBytes);
  FillPattern(region, 0);
  auto transport = UcxTransport::Create({.region = region,
                                         .listen_address = "127.0.0.1:0",
                                         .data_path = row.data_path,
                                         .transports = std::string(row.transports),
                                         .net_devices = std::string(row.net_devices),
                                         .name = "remote-bench-peer"});
  if (!transport.ok()) {
    fmt::print(stderr, "remote_bench peer: {}\n", transport.status());
    return 1;
  }
  fmt::print("{}\n", (*transport)->listen_address());
  std::fflush(stdout);
  for (char byte;;) {
    const ssize_t n = ::read(STDIN_FILENO, &byte, 1);
    if (n == 0 || (n < 0 && errno != EINTR)) return 0;
  }
}

// A --serve child, tied to us by its stdin; closing it asks the peer to exit.
struct Peer {
  Child child;
  ScopedFd stdin_pipe;
  std::string address;
};

absl::StatusOr<Peer> StartPeer(const Row& row) {
  STRATA_ASSIGN_OR_RETURN(const std::string self, SelfPath());
  STRATA_ASSIGN_OR_RETURN(Pipe in, MakePipe());
  STRATA_ASSIGN_OR_RETURN(Pipe out, MakePipe());
  STRATA_ASSIGN_OR_RETURN(
      Child child, Child::Spawn(self, {self, fmt::format("--serve={}", row.name)}, Environment(),
                                {.in = in.read.get(), .out = out.write.get()}));
  out.write.Reset();
  auto line = ReadOutput(out.read.get(), Clock::now() + kStartTimeout,
                         [](std::string_view text) { return text.find('\n') != text.npos; });
  if (!line.ok() || line->find('\n') == std::string::npos) {
    return absl::UnavailableError(fmt::format("peer did not report its address ({})",
                                              line.ok() ? "it exited" : line.status().ToString()));
  }
  return Peer{std::move(child), std::move(in.write), line->substr(0, line->find('\n'))};
}

void StopPeer(Peer& peer) {
  peer.stdin_pipe.Reset();
  if (!peer.child.WaitFor(kStopGrace)) peer.child.Stop(kStopGrace);
}

// --- Strata fetches ------------------------------------------------------------------------------

struct LoopStats {
  int in_flight = 0;
  uint64_t fetches = 0;
  double seconds = 0;
  double p50_s = 0;
  double GBps() const { return seconds > 0 ? fetches * kChunkBytes / seconds / 1e9 : 0; }
};

// Keeps fetches in flight over one link, each into its own 32 MiB slot of the client region; a
// completion (on the transport's progress thread) starts its slot's next fetch until the loop's
// bounds are reached. Run() returns once every fetch it started has completed. Run is called from
// one thread at a time.
class FetchLoop {
 public:
  FetchLoop(Transport& transport, PeerId peer, std::span<std::byte> region)
      : transport_(transport), peer_(peer), expected_(kChunkBytes) {
    for (int slot = 0; slot < kMaxInFlight; ++slot) {
      const auto local = region.subspan(slot * kChunkBytes, kChunkBytes);
      for (uint64_t i = 0; i < kSegmentsPerChunk; ++i) {
        slots_[slot].segments.push_back({.local = local.subspan(i * kSegmentBytes, kSegmentBytes)});
      }
    }
  }

  // Fetches with `in_flight` in flight until `max_fetches` have started or `max_time` has passed,
  // then verifies each slot's last chunk. The first failed fetch's status, or kDataLoss.
  absl::StatusOr<LoopStats> Run(int in_flight, uint64_t max_fetches, Clock::duration max_time) {
    for (int slot = 0; slot < in_flight; ++slot) Clear(slots_[slot]);
    const auto start = Clock::now();
    {
      absl::MutexLock lock(&mu_);
      max_fetches_ = std::max<uint64_t>(max_fetches, in_flight);
      stop_at_ = start + max_time;
      started_ = in_flight;
      active_ = in_flight;
      latencies_s_.clear();
      status_ = absl::OkStatus();
    }
    for (int slot = 0; slot < in_flight; ++slot) Start(slot, slot);
    AwaitIdle(max_time + kFetchTimeout);
    absl::MutexLock lock(&mu_);
    STRATA_RETURN_IF_ERROR(status_);
    for (int slot = 0; slot < in_flight; ++slot) STRATA_RETURN_IF_ERROR(Verify(slot));
    return LoopStats{.in_flight = in_flight,
                     .fetches = latencies_s_.size(),
                     .seconds = Seconds(last_done_ - start),
                     .p50_s = Median(latencies_s_)};
  }

 private:
  struct Slot {
    std::vector<Segment> segments;
    uint64_t chunk = 0;  // the peer's chunk the slot fetches (or fetched last)
    Clock::time_point started;
    std::atomic<RequestId> request = 0;  // the latest fetch's, for Cancel
  };

  static void Clear(Slot& slot) {
    for (const Segment& segment : slot.segments) {
      std::memset(segment.local.data(), 0, segment.local.size());
    }
  }

  // Starts the loop's `fetch`-th fetch into `slot`. Called without mu_.
  void Start(int slot, uint64_t fetch) {
    Slot& s = slots_[slot];
    s.chunk = fetch % kPeerChunks;
    for (uint64_t i = 0; i < kSegmentsPerChunk; ++i) {
      s.segments[i].remote_offset = s.chunk * kChunkBytes + i * kSegmentBytes;
    }
    s.started = Clock::now();
    const RequestId id = transport_.Read(peer_, s.segments, s.started + kFetchTimeout,
                                         [this, slot](absl::Status status) { Done(slot, status); });
    // The completion may have started the slot's next fetch already; ids only grow.
    RequestId seen = s.request.load();
    while (seen < id && !s.request.compare_exchange_weak(seen, id)) {
    }
  }

  void Done(int slot, const absl::Status& status) {
    const auto now = Clock::now();
    std::optional<uint64_t> next;
    {
      absl::MutexLock lock(&mu_);
      if (!status.ok() && status_.ok()) {
        status_ = Annotate(status, fmt::format("fetch of chunk {}", slots_[slot].chunk));
      } else if (status.ok()) {
        latencies_s_.push_back(Seconds(now - slots_[slot].started));
        last_done_ = now;
      }
      if (status_.ok() && started_ < max_fetches_ && now < stop_at_) {
        next = started_++;
      } else {
        --active_;
      }
    }
    if (next) Start(slot, *next);
  }

  // Waits for every started fetch to complete. Fetches carry deadlines, so the wait ends unless
  // the transport breaks its contract; then the fetches are cancelled, and if even that does not
  // end them the process exits, as the transport may still write into the slots.
  void AwaitIdle(Clock::duration limit) {
    const absl::Condition idle(this, &FetchLoop::Idle);
    {
      absl::MutexLock lock(&mu_);
      if (mu_.AwaitWithTimeout(idle, absl::FromChrono(limit))) return;
      if (status_.ok()) status_ = absl::DeadlineExceededError("fetches outlived their deadline");
    }
    for (Slot& slot : slots_) transport_.Cancel(slot.request);
    absl::MutexLock lock(&mu_);
    if (mu_.AwaitWithTimeout(idle, absl::FromChrono(kFetchTimeout))) return;
    fmt::print(stderr, "remote_bench: cancelled fetches did not complete; exiting\n");
    std::_Exit(1);
  }

  bool Idle() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return active_ == 0; }

  absl::Status Verify(int slot) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    const Slot& s = slots_[slot];
    FillPattern(expected_, s.chunk * kChunkBytes);
    const std::span<const std::byte> got(s.segments.front().local.data(), kChunkBytes);
    return CompareBytes(got, expected_, fmt::format("slot {} (chunk {})", slot, s.chunk));
  }

  Transport& transport_;
  const PeerId peer_;
  std::array<Slot, kMaxInFlight> slots_;
  std::vector<std::byte> expected_;

  absl::Mutex mu_;
  uint64_t max_fetches_ ABSL_GUARDED_BY(mu_) = 0;
  Clock::time_point stop_at_ ABSL_GUARDED_BY(mu_);
  uint64_t started_ ABSL_GUARDED_BY(mu_) = 0;
  int active_ ABSL_GUARDED_BY(mu_) = 0;
  std::vector<double> latencies_s_ ABSL_GUARDED_BY(mu_);
  Clock::time_point last_done_ ABSL_GUARDED_BY(mu_);
  absl::Status status_ ABSL_GUARDED_BY(mu_);
};

struct StrataResult {
  LoopStats one;        // 1 fetch in flight
  LoopStats pipelined;  // kMaxInFlight
  const LoopStats& best() const { return pipelined.GBps() > one.GBps() ? pipelined : one; }
};

absl::Status CheckDataPath(const Transport& transport, PeerId peer, DataPath expected) {
  for (const auto& stats : transport.Peers()) {
    if (stats.id == peer && stats.data_path == expected) return absl::OkStatus();
  }
  return absl::InternalError(
      fmt::format("the link does not take the {} data path", DataPathName(expected)));
}

absl::StatusOr<StrataResult> FetchFromPeer(const Row& row, const Flags& flags,
                                           const std::string& address) {
  std::vector<std::byte> region(kMaxInFlight * kChunkBytes);
  STRATA_ASSIGN_OR_RETURN(auto transport,
                          UcxTransport::Create({.region = region,
                                                .data_path = row.data_path,
                                                .transports = std::string(row.transports),
                                                .net_devices = std::string(row.net_devices),
                                                .name = "remote-bench"}));
  STRATA_ASSIGN_OR_RETURN(const PeerId peer, transport->Connect(address, kStartTimeout));
  STRATA_RETURN_IF_ERROR(CheckDataPath(*transport, peer, row.data_path));
  FetchLoop loop(*transport, peer, region);
  const Clock::duration max_time = Duration(flags.seconds);
  STRATA_RETURN_IF_ERROR(loop.Run(kMaxInFlight, kWarmupFetches, kFetchTimeout).status());
  StrataResult result;
  STRATA_ASSIGN_OR_RETURN(result.one, loop.Run(1, flags.iterations, max_time));
  STRATA_ASSIGN_OR_RETURN(result.pipelined, loop.Run(kMaxInFlight, flags.iterations, max_time));
  return result;
}

absl::StatusOr<StrataResult> MeasureStrata(const Row& row, const Flags& flags) {
  STRATA_ASSIGN_OR_RETURN(Peer peer, StartPeer(row));
  absl::StatusOr<StrataResult> result = FetchFromPeer(row, flags, peer.address);
  StopPeer(peer);
  return result;
}

// --- ucx_perftest --------------------------------------------------------------------------------

// The '|'-separated cells of a table line, as [begin, end) character ranges.
std::vector<std::pair<size_t, size_t>> Cells(std::string_view line) {
  std::vector<std::pair<size_t, size_t>> cells;
  for (size_t bar = line.find('|'); bar != std::string_view::npos;) {
    const size_t next = line.find('|', bar + 1);
    if (next == std::string_view::npos) break;
    cells.emplace_back(bar + 1, next);
    bar = next;
  }
  return cells;
}

std::vector<std::string_view> Lines(std::string_view text) {
  std::vector<std::string_view> lines;
  while (!text.empty()) {
    const size_t end = text.find('\n');
    lines.push_back(text.substr(0, end));
    text = end == std::string_view::npos ? std::string_view() : text.substr(end + 1);
  }
  return lines;
}

std::vector<std::string_view> Words(std::string_view line) {
  std::vector<std::string_view> words;
  while (true) {
    const size_t begin = line.find_first_not_of(' ');
    if (begin == std::string_view::npos) break;
    line.remove_prefix(begin);
    const size_t end = std::min(line.find(' '), line.size());
    words.push_back(line.substr(0, end));
    line.remove_prefix(end);
  }
  return words;
}

// The overall bandwidth on ucx_perftest's "Final:" line, in GB/s (1e9 bytes/s). The column is
// the "overall" one under the "bandwidth (MB/s)" heading; ucx_perftest's MB/s are 2^20 bytes/s.
absl::StatusOr<double> ParsePerftestBandwidth(std::string_view output) {
  constexpr std::string_view kHeading = "bandwidth (MB/s)";
  std::optional<std::pair<size_t, size_t>> group;
  std::optional<size_t> column;
  for (std::string_view line : Lines(output)) {
    if (!group && line.find(kHeading) != line.npos) {
      const size_t at = line.find(kHeading);
      for (const auto& cell : Cells(line)) {
        if (cell.first <= at && at < cell.second) group = cell;
      }
    } else if (group && !column && line.find("overall") != line.npos) {
      const auto cells = Cells(line);
      for (size_t i = 0; i < cells.size(); ++i) {
        const auto [begin, end] = cells[i];
        const bool inside = group->first <= begin && end <= group->second;
        if (inside && line.substr(begin, end - begin).find("overall") != line.npos) column = i;
      }
    } else if (column && line.starts_with("Final:")) {
      const std::vector<std::string_view> words = Words(line);
      double mb_per_s = 0;
      if (*column >= words.size()) break;
      const std::string_view word = words[*column];
      if (std::from_chars(word.data(), word.data() + word.size(), mb_per_s).ec != std::errc()) {
        break;
      }
      return mb_per_s * (1 << 20) / 1e9;
    }
  }
  return absl::InternalError(fmt::format(
      "no overall bandwidth in MB/s on a Final: line of ucx_perftest's output:\n{}", output));
}

// Runs the ucx_perftest client once; its stdout and stderr.
absl::StatusOr<std::string> RunPerftestClient(const std::string& path,
                                              const std::vector<std::string>& args,
                                              const std::vector<std::string>& env,
                                              Clock::time_point deadline) {
  STRATA_ASSIGN_OR_RETURN(Pipe out, MakePipe());
  STRATA_ASSIGN_OR_RETURN(
      Child client,
      Child::Spawn(path, args, env, {.out = out.write.get(), .err = out.write.get()}));
  out.write.Reset();
  absl::StatusOr<std::string> text = ReadOutput(out.read.get(), deadline, nullptr);
  client.WaitFor(kStopGrace);
  return text;
}

// ucx_perftest between two processes configured like `row`: `messages` messages of 32 MiB.
absl::StatusOr<double> MeasurePerftest(const Row& row, uint64_t messages, const Flags& flags) {
  const std::optional<std::string> path = FindExecutable("ucx_perftest");
  if (!path) return absl::UnavailableError("ucx_perftest is not on PATH (Debian: ucx-utils)");
  STRATA_ASSIGN_OR_RETURN(const uint16_t port, FreePort());
  const std::vector<std::string> env = UcxEnvironment(row);
  STRATA_ASSIGN_OR_RETURN(Child server,
                          Child::Spawn(*path, {*path, "-p", std::to_string(port)}, env, {}));
  const std::vector<std::string> args = {*path, "127.0.0.1",
                                         "-p",  std::to_string(port),
                                         "-t",  std::string(row.perftest_test),
                                         "-s",  std::to_string(kChunkBytes),
                                         "-n",  std::to_string(messages),
                                         "-w",  std::to_string(kWarmupFetches)};
  // As many bytes as Strata moved in at most --seconds: allow for a baseline 10x slower.
  const auto deadline = Clock::now() + kStartTimeout + 10 * Duration(flags.seconds);
  absl::StatusOr<std::string> output;
  do {  // until the server listens
    std::this_thread::sleep_for(20ms);
    output = RunPerftestClient(*path, args, env, deadline);
  } while (output.ok() && output->find("connect() failed") != std::string::npos &&
           !server.WaitFor(0s) && Clock::now() < deadline);
  server.WaitFor(kStopGrace);
  server.Stop(0s);
  STRATA_RETURN_IF_ERROR(output.status());
  return ParsePerftestBandwidth(*output);
}

// --- Redis ---------------------------------------------------------------------------------------

// A blocking RESP2 client on one TCP connection, for SET and GET of bulk strings. Each send or
// receive gives up after kFetchTimeout. Move-only; not thread-safe.
class RespClient {
 public:
  // Connects to 127.0.0.1:port, retrying until `deadline` while `server` runs.
  static absl::StatusOr<RespClient> Connect(uint16_t port, Child& server,
                                            Clock::time_point deadline) {
    while (true) {
      ScopedFd fd(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
      if (!fd.valid()) return ErrnoToStatus(errno, "socket");
      const sockaddr_in address{
          .sin_family = AF_INET, .sin_port = htons(port), .sin_addr = {htonl(INADDR_LOOPBACK)}};
      if (::connect(fd.get(), reinterpret_cast<const sockaddr*>(&address), sizeof(address)) == 0) {
        const timeval timeout{.tv_sec = std::chrono::seconds(kFetchTimeout).count(), .tv_usec = 0};
        const int one = 1;
        ::setsockopt(fd.get(), SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof(timeout));
        ::setsockopt(fd.get(), SOL_SOCKET, SO_SNDTIMEO, &timeout, sizeof(timeout));
        ::setsockopt(fd.get(), IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
        return RespClient(std::move(fd));
      }
      if (const auto code = server.WaitFor(0s)) {
        return absl::UnavailableError(fmt::format("redis-server exited with status {}", *code));
      }
      if (Clock::now() >= deadline) return ErrnoToStatus(errno, "connect to redis-server");
      std::this_thread::sleep_for(10ms);
    }
  }

  absl::Status Set(std::string_view key, std::span<const std::byte> value) {
    STRATA_RETURN_IF_ERROR(Send(
        fmt::format("*3\r\n$3\r\nSET\r\n${}\r\n{}\r\n${}\r\n", key.size(), key, value.size())));
    STRATA_RETURN_IF_ERROR(Send({reinterpret_cast<const char*>(value.data()), value.size()}));
    STRATA_RETURN_IF_ERROR(Send("\r\n"));
    STRATA_ASSIGN_OR_RETURN(const std::string reply, ReadLine());
    if (reply != "+OK") return absl::InternalError(fmt::format("redis SET: {}", reply));
    return absl::OkStatus();
  }

  // Reads the key's value into `out`, which must be the value's size.
  absl::Status Get(std::string_view key, std::span<std::byte> out) {
    STRATA_RETURN_IF_ERROR(Send(fmt::format("*2\r\n$3\r\nGET\r\n${}\r\n{}\r\n", key.size(), key)));
    STRATA_ASSIGN_OR_RETURN(const std::string header, ReadLine());
    if (header != fmt::format("${}", out.size())) {
      return absl::InternalError(
          fmt::format("redis GET: reply {} for {} bytes", header, out.size()));
    }
    STRATA_RETURN_IF_ERROR(Receive(out));
    std::array<std::byte, 2> end;
    STRATA_RETURN_IF_ERROR(Receive(end));
    if (end[0] != std::byte{'\r'} || end[1] != std::byte{'\n'}) {
      return absl::InternalError("redis GET: the bulk string does not end in CRLF");
    }
    return absl::OkStatus();
  }

 private:
  explicit RespClient(ScopedFd fd) : fd_(std::move(fd)) {}

  absl::Status Send(std::string_view bytes) {
    while (!bytes.empty()) {
      const ssize_t n = ::send(fd_.get(), bytes.data(), bytes.size(), MSG_NOSIGNAL);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) return ErrnoToStatus(errno, "send to redis-server");
      bytes.remove_prefix(static_cast<size_t>(n));
    }
    return absl::OkStatus();
  }

  // Fills `out` from what was buffered, then straight from the socket.
  absl::Status Receive(std::span<std::byte> out) {
    const size_t buffered = std::min(out.size(), buffered_.size());
    std::memcpy(out.data(), buffered_.data(), buffered);
    buffered_.erase(0, buffered);
    for (size_t done = buffered; done < out.size();) {
      const ssize_t n = ::recv(fd_.get(), out.data() + done, out.size() - done, 0);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0)
        return n == 0 ? absl::UnavailableError("redis-server closed the connection")
                      : ErrnoToStatus(errno, "receive from redis-server");
      done += static_cast<size_t>(n);
    }
    return absl::OkStatus();
  }

  // The next line without its CRLF.
  absl::StatusOr<std::string> ReadLine() {
    while (buffered_.find("\r\n") == std::string::npos) {
      std::array<char, 4096> chunk;
      const ssize_t n = ::recv(fd_.get(), chunk.data(), chunk.size(), 0);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0)
        return n == 0 ? absl::UnavailableError("redis-server closed the connection")
                      : ErrnoToStatus(errno, "receive from redis-server");
      buffered_.append(chunk.data(), static_cast<size_t>(n));
    }
    const size_t end = buffered_.find("\r\n");
    std::string line = buffered_.substr(0, end);
    buffered_.erase(0, end + 2);
    return line;
  }

  ScopedFd fd_;
  std::string buffered_;  // received past the last line read
};

struct RedisStats {
  uint64_t gets = 0;
  double seconds = 0;
  double p50_s = 0;
  double GBps() const { return seconds > 0 ? gets * kChunkBytes / seconds / 1e9 : 0; }
};

absl::StatusOr<RedisStats> TimeGets(RespClient& client, const Flags& flags) {
  std::vector<std::byte> value(kChunkBytes);
  FillPattern(value, 0);
  STRATA_RETURN_IF_ERROR(client.Set("chunk", value));
  std::vector<std::byte> got(kChunkBytes);
  STRATA_RETURN_IF_ERROR(client.Get("chunk", got));
  STRATA_RETURN_IF_ERROR(CompareBytes(got, value, "redis GET"));
  std::vector<double> latencies_s;
  const auto start = Clock::now();
  const auto stop_at = start + Duration(flags.seconds);
  auto now = start;
  while (latencies_s.size() < flags.iterations && now < stop_at) {
    STRATA_RETURN_IF_ERROR(client.Get("chunk", got));
    const auto done = Clock::now();
    latencies_s.push_back(Seconds(done - now));
    now = done;
  }
  return RedisStats{
      .gets = latencies_s.size(), .seconds = Seconds(now - start), .p50_s = Median(latencies_s)};
}

absl::StatusOr<RedisStats> MeasureRedis(const Flags& flags) {
  const std::optional<std::string> path = FindExecutable("redis-server");
  if (!path) {
    return absl::UnavailableError(
        "redis-server is not on PATH (Debian: redis-server; scripts/install-deps.sh installs it)");
  }
  STRATA_ASSIGN_OR_RETURN(const uint16_t port, FreePort());
  STRATA_ASSIGN_OR_RETURN(Child server, Child::Spawn(*path,
                                                     {*path, "--port", std::to_string(port),
                                                      "--save", "", "--appendonly", "no", "--bind",
                                                      "127.0.0.1", "--protected-mode", "no"},
                                                     Environment(), {.err = -1}));
  absl::StatusOr<RedisStats> stats = [&]() -> absl::StatusOr<RedisStats> {
    STRATA_ASSIGN_OR_RETURN(RespClient client,
                            RespClient::Connect(port, server, Clock::now() + kStartTimeout));
    return TimeGets(client, flags);
  }();
  server.Stop(kStopGrace);
  return stats;
}

// --- Report --------------------------------------------------------------------------------------

std::string CpuModel() {
  std::ifstream cpuinfo("/proc/cpuinfo");
  for (std::string line; std::getline(cpuinfo, line);) {
    if (line.starts_with("model name")) return line.substr(line.find(':') + 2);
  }
  return "unknown cpu";
}

constexpr std::string_view kRowFormat =
    "{:<8} {:>6} {:>7} {:>9}  {:<13} {:<13}  {:<22} {:>6} {:>6} {:>7}\n";

std::string Loop(const LoopStats& stats) {
  return fmt::format("{:.2f} ({:.1f})", stats.GBps(), stats.p50_s * 1e3);
}

std::string Ratio(double strata, const absl::StatusOr<double>& baseline) {
  return baseline.ok() && *baseline > 0 ? fmt::format("{:.2f}x", strata / *baseline) : "n/a";
}

std::string Baseline(const absl::StatusOr<double>& baseline) {
  return baseline.ok() ? fmt::format("{:.2f}", *baseline) : "n/a";
}

void PrintHeader(const Flags& flags) {
  fmt::print(
      "remote_bench: 32 MiB chunk fetches (16 x 2 MiB segments) from a peer process over "
      "UcxTransport\n"
      "machine: nproc={}, {}; each timed loop: at most {} fetches or {:.1f} s\n"
      "GB/s = 1e9 bytes/s; p50 = median latency of one 32 MiB fetch; N: = N fetches in flight; "
      "the row takes the faster\n\n",
      std::thread::hardware_concurrency(), CpuModel(), flags.iterations, flags.seconds);
  fmt::print(kRowFormat, "row", "GB/s", "p50_ms", "in_flight", "1: GB/s (ms)",
             fmt::format("{}: GB/s (ms)", kMaxInFlight), "baseline", "GB/s", "ratio", "target");
}

void PrintStrataRow(const Row& row, const StrataResult& result,
                    const absl::StatusOr<double>& perftest) {
  const LoopStats& best = result.best();
  fmt::print(kRowFormat, row.name, fmt::format("{:.2f}", best.GBps()),
             fmt::format("{:.1f}", best.p50_s * 1e3), best.in_flight, Loop(result.one),
             Loop(result.pipelined), fmt::format("ucx_perftest {}", row.perftest_test),
             Baseline(perftest), Ratio(best.GBps(), perftest), ">=0.8x");
}

// The Strata columns repeat the faster tcp row's figures.
void PrintRedisRow(std::string_view tcp_row, const LoopStats& tcp,
                   const absl::StatusOr<RedisStats>& redis) {
  const absl::StatusOr<double> gbps =
      redis.ok() ? absl::StatusOr<double>(redis->GBps()) : redis.status();
  fmt::print(kRowFormat, "redis", fmt::format("{:.2f}", tcp.GBps()),
             fmt::format("{:.1f}", tcp.p50_s * 1e3), tcp.in_flight, fmt::format("(as {})", tcp_row),
             "",
             redis.ok() ? fmt::format("redis GET, p50 {:.1f} ms", redis->p50_s * 1e3)
                        : std::string("redis GET"),
             Baseline(gbps), Ratio(tcp.GBps(), gbps), ">=1.5x");
}

int Main(const Flags& flags) {
  PrintHeader(flags);
  std::vector<std::string> notes;
  bool failed = false;
  std::optional<std::pair<std::string_view, LoopStats>> best_tcp;
  for (const Row& row : kRows) {
    if (!flags.only.empty() && row.family != flags.only) continue;
    const absl::StatusOr<StrataResult> strata = MeasureStrata(row, flags);
    if (!strata.ok()) {
      failed = true;
      fmt::print("{:<8} FAILED: {}\n", row.name, strata.status());
      continue;
    }
    const absl::StatusOr<double> perftest =
        MeasurePerftest(row, std::max(strata->best().fetches, kWarmupFetches * 4), flags);
    if (!perftest.ok())
      notes.push_back(fmt::format("{} baseline: {}", row.name, perftest.status()));
    PrintStrataRow(row, *strata, perftest);
    if (row.family == "tcp" && (!best_tcp || strata->best().GBps() > best_tcp->second.GBps())) {
      best_tcp.emplace(row.name, strata->best());
    }
  }
  if (best_tcp) {
    const absl::StatusOr<RedisStats> redis = MeasureRedis(flags);
    if (!redis.ok()) notes.push_back(fmt::format("redis row skipped: {}", redis.status()));
    PrintRedisRow(best_tcp->first, best_tcp->second, redis);
  } else {
    notes.emplace_back("redis row skipped: it compares with a tcp row, and none ran");
  }
  for (const std::string& note : notes) fmt::print("note: {}\n", note);
  return failed ? 1 : 0;
}

// --- Flags ---------------------------------------------------------------------------------------

template <typename T>
bool ParseNumber(std::string_view text, T& value) {
  return std::from_chars(text.data(), text.data() + text.size(), value).ec == std::errc() &&
         value > 0;
}

std::optional<Flags> ParseFlags(int argc, char** argv) {
  Flags flags;
  for (int i = 1; i < argc; ++i) {
    std::string_view arg = argv[i];
    const size_t eq = arg.find('=');
    const std::string_view name = arg.substr(0, eq);
    std::string_view value;
    if (eq != std::string_view::npos) {
      value = arg.substr(eq + 1);
    } else if (i + 1 < argc) {
      value = argv[++i];
    }
    bool ok = true;
    if (name == "--iterations") {
      ok = ParseNumber(value, flags.iterations);
    } else if (name == "--seconds") {
      ok = ParseNumber(value, flags.seconds);
    } else if (name == "--only") {
      flags.only = value;
      ok = value == "tcp" || value == "shm";
    } else if (name == "--serve") {
      flags.serve = value;
      ok = FindRow(value) != nullptr;
    } else {
      ok = false;
    }
    if (!ok) return std::nullopt;
  }
  return flags;
}

}  // namespace
}  // namespace strata::bench

int main(int argc, char** argv) {
  const std::optional<strata::bench::Flags> flags = strata::bench::ParseFlags(argc, argv);
  if (!flags) {
    fmt::print(stderr, "usage: {} [--iterations=N] [--seconds=S] [--only=tcp|shm]\n", argv[0]);
    return 2;
  }
  if (!flags->serve.empty()) return strata::bench::Serve(*strata::bench::FindRow(flags->serve));
  return strata::bench::Main(*flags);
}
