// What the remote benchmarks (bench/micro/remote_bench) measure Strata against, run in the same
// process tree and the same run (BASELINES.md), and the plumbing that needs:
//
//   - Child: a child process that dies with the benchmark (PR_SET_PDEATHSIG) and is otherwise
//     stopped and reaped with bounded waits (SIGTERM, then SIGKILL) when the Child is destroyed;
//   - MeasurePerftest: ucx_perftest between two processes (server and client, both children)
//     with a given UCX_TLS / UCX_NET_DEVICES, message size and count; its overall bandwidth;
//   - MeasureRedis: a redis-server without persistence (a child) holding one value, and GETs of
//     it timed on one connection by RespClient, a minimal blocking RESP2 client;
//   - report helpers: the CPU model, ratio and baseline cells for tables, JSON strings.
//
// A baseline that cannot run (its tool missing, its tool failing) answers an error status naming
// the reason, never a figure. Every wait is bounded; no function here leaves a child running.
// Threading: free functions are thread-safe unless they take a Child or a RespClient, which are
// not; none of them installs a signal handler or changes the process's environment.
#pragma once

#include <sys/types.h>
#include <unistd.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/scoped_fd.h"

namespace strata::bench {

using BenchClock = std::chrono::steady_clock;

// How long a stopped child gets between SIGTERM and SIGKILL.
inline constexpr BenchClock::duration kChildStopGrace = std::chrono::seconds(5);

double Seconds(BenchClock::duration d);
BenchClock::duration Duration(double seconds);
// The upper median (values.size() / 2 after sorting); 0 for no values.
double Median(std::vector<double> values);

// --- Bytes ---------------------------------------------------------------------------------------

// Fills `bytes` (which starts at `first_offset` of a notional stream) with a distinct 64-bit word
// at every 8-byte offset, so a misplaced piece cannot compare equal.
void FillPattern(std::span<std::byte> bytes, uint64_t first_offset);

// OK when `got` starts with `expected`'s bytes; else kDataLoss naming `what` and the first
// differing offset. `got` must be at least as long as `expected`.
absl::Status CompareBytes(std::span<const std::byte> got, std::span<const std::byte> expected,
                          std::string_view what);

// --- Processes -----------------------------------------------------------------------------------

// The first executable `name` on PATH (/usr/bin:/bin when PATH is unset), or nullopt.
std::optional<std::string> FindExecutable(std::string_view name);
// This executable's path (/proc/self/exe).
absl::StatusOr<std::string> SelfPath();
// This process's environment, as KEY=VALUE strings.
std::vector<std::string> Environment();
// This process's environment with UCX_TLS and UCX_NET_DEVICES replaced by `transports` and
// `net_devices`; an empty one is left unset (UCX's default).
std::vector<std::string> UcxEnvironment(std::string_view transports, std::string_view net_devices);

// A pipe; both ends close on exec.
struct Pipe {
  ScopedFd read;
  ScopedFd write;
};
absl::StatusOr<Pipe> MakePipe();

// Descriptors of ours that become a child's stdin, stdout and stderr; -1 is /dev/null. The
// caller keeps owning them (the child gets duplicates).
struct Stdio {
  int in = -1;
  int out = -1;
  int err = STDERR_FILENO;
};

// A child process. It is killed when the thread that spawned it exits or this process dies
// (PR_SET_PDEATHSIG), and stopped and reaped (Stop(0s): SIGTERM, then SIGKILL at once when it has
// not exited) when the Child is destroyed. Move-only; not thread-safe.
class Child {
 public:
  // Forks and execs `path` with argv `args` and environment `env`. On success the child runs
  // (an exec failure shows as exit code 127); on failure nothing was started.
  static absl::StatusOr<Child> Spawn(const std::string& path, const std::vector<std::string>& args,
                                     const std::vector<std::string>& env, Stdio stdio);

  Child(Child&& other) noexcept;
  Child& operator=(Child&&) = delete;
  ~Child();

  pid_t pid() const { return pid_; }
  // The exit code (128 + signal for a signal) once the child has exited, waiting up to `limit`
  // (0: just looks); nullopt while it runs. The child is reaped once it has exited.
  std::optional<int> WaitFor(BenchClock::duration limit);
  // SIGTERM, up to `grace` for the exit, then SIGKILL; reaps the child either way. No-op once
  // it has been reaped.
  void Stop(BenchClock::duration grace);

 private:
  explicit Child(pid_t pid) : pid_(pid) {}
  pid_t pid_ = -1;
  std::optional<int> exit_code_;
};

// What `fd` yields until EOF, or until `enough` (when set) holds for the text so far.
// kDeadlineExceeded (with the text so far) when neither happens by `deadline`.
absl::StatusOr<std::string> ReadOutput(int fd, BenchClock::time_point deadline,
                                       const std::function<bool(std::string_view)>& enough);

// A port on 127.0.0.1 that nothing was bound to a moment ago (another process may take it).
absl::StatusOr<uint16_t> FreePort();

// --- ucx_perftest --------------------------------------------------------------------------------

// The overall bandwidth on ucx_perftest's "Final:" line, in GB/s (1e9 bytes/s): the "overall"
// column under the "bandwidth (MB/s)" heading, whose MB are 2^20 bytes. kInternal with the
// output when there is no such figure.
absl::StatusOr<double> ParsePerftestBandwidth(std::string_view output);

struct PerftestOptions {
  std::string test;         // -t: "ucp_am_bw", "ucp_get", ...
  std::string transports;   // UCX_TLS for both processes; "" leaves UCX's default
  std::string net_devices;  // UCX_NET_DEVICES for both; "" leaves UCX's default
  uint64_t message_bytes = 0;
  uint64_t messages = 0;  // timed messages (-n)
  uint64_t warmup = 0;    // untimed messages before them (-w)
  // The whole measurement, server start included, ends by this long from the call.
  BenchClock::duration timeout = std::chrono::seconds(30);
};

// Runs `ucx_perftest -p PORT` as a server and `ucx_perftest 127.0.0.1 -p PORT ...` as its client
// (retried while the server does not listen yet), both with `options`' UCX settings, and returns
// the client's overall bandwidth in GB/s. kUnavailable when ucx_perftest is not on PATH; the
// client's output in the error when it reports no bandwidth; kDeadlineExceeded at the timeout.
// Both processes are stopped and reaped before it returns.
absl::StatusOr<double> MeasurePerftest(const PerftestOptions& options);

// --- Redis ---------------------------------------------------------------------------------------

// A blocking RESP2 client on one TCP connection to 127.0.0.1, for SET and GET of bulk strings.
// Each send or receive gives up after the connection's io_timeout. Move-only; not thread-safe.
class RespClient {
 public:
  // Connects to 127.0.0.1:port, retrying until `deadline` while `server` runs; kUnavailable when
  // the server exited, the connect error at the deadline.
  static absl::StatusOr<RespClient> Connect(uint16_t port, Child& server,
                                            BenchClock::time_point deadline,
                                            std::chrono::seconds io_timeout);

  // SET key value; kInternal unless redis answers +OK.
  absl::Status Set(std::string_view key, std::span<const std::byte> value);
  // GET key into `out`, which must be the value's size (kInternal when the reply is another
  // size or not a bulk string).
  absl::Status Get(std::string_view key, std::span<std::byte> out);

 private:
  explicit RespClient(ScopedFd fd) : fd_(std::move(fd)) {}

  absl::Status Send(std::string_view bytes);
  // Fills `out` from what was buffered, then straight from the socket.
  absl::Status Receive(std::span<std::byte> out);
  // The next line without its CRLF.
  absl::StatusOr<std::string> ReadLine();

  ScopedFd fd_;
  std::string buffered_;  // received past the last line read
};

struct RedisStats {
  uint64_t value_bytes = 0;
  uint64_t gets = 0;   // timed GETs
  double seconds = 0;  // from the first timed GET's request to the last one's reply
  double p50_s = 0;    // median GET latency
  double GBps() const { return seconds > 0 ? gets * value_bytes / seconds / 1e9 : 0; }
};

struct RedisOptions {
  uint64_t value_bytes = 0;
  // The timed loop stops after max_gets GETs or max_time, whichever comes first.
  uint64_t max_gets = 1000;
  BenchClock::duration max_time = std::chrono::seconds(1);
  std::chrono::seconds io_timeout{10};  // per send or receive
};

// Starts redis-server on a free port of 127.0.0.1 (no RDB, no AOF), SETs one patterned value of
// value_bytes, GETs it once and compares it, then times GETs of it, one in flight. kUnavailable
// when redis-server is not on PATH or exits; kDataLoss when the value comes back different. The
// server is stopped and reaped before it returns.
absl::StatusOr<RedisStats> MeasureRedis(const RedisOptions& options);

// --- Reports -------------------------------------------------------------------------------------

// /proc/cpuinfo's first "model name", or "unknown cpu".
std::string CpuModel();
// "1.23x" (strata / baseline), or "n/a" when the baseline failed or is not positive.
std::string FormatRatio(double strata, const absl::StatusOr<double>& baseline);
// "1.23" (the baseline's GB/s), or "n/a" when it failed.
std::string FormatBaseline(const absl::StatusOr<double>& baseline);
// `text` as a JSON string literal: quoted, with quotes, backslashes and control bytes escaped.
std::string JsonString(std::string_view text);
// A JSON number with `decimals` decimals, or null for a NaN or an infinity.
std::string JsonNumber(double value, int decimals = 3);
// The baseline's GB/s as a JSON number, or null when it failed.
std::string JsonBaseline(const absl::StatusOr<double>& baseline);
// strata / baseline as a JSON number, or null when the baseline failed or is not positive.
std::string JsonRatio(double strata, const absl::StatusOr<double>& baseline);

}  // namespace strata::bench
