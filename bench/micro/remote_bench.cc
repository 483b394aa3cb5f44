// remote_bench: fetching 32 MiB chunks from a peer's memory, against ucx_perftest and Redis
// measured in the same run (BASELINES.md). Two kinds of rows: a bare UcxTransport between two
// bench processes ("transport rows"), and two stratad daemons where one promotes chunks from
// the other through its remote tier ("daemon rows"), the path an engine's load takes.
//
// Transport rows. For each row the bench runs itself again with --serve=ROW in a child process:
// a UcxTransport over a 256 MiB region (eight 32 MiB chunks of a pattern that differs at every
// 8-byte word) listening on 127.0.0.1:0. The child writes its listen address on stdout and serves
// until its stdin, a pipe from the bench, closes. The client is a UcxTransport over a 128 MiB
// region: four 32 MiB slots. One fetch is one Read of a 32 MiB chunk (chunk i % 8 of the peer
// for the i-th fetch) as 16 segments of 2 MiB, the host arena's page size. Once the link is up
// and 4 untimed fetches have warmed it, two timed loops run: 1 fetch in flight, then 4 (each
// completion starts its slot's next fetch on the transport's progress thread). A loop stops
// after --iterations fetches or --seconds, whichever comes first. GB/s is bytes / 1e9 per second
// from the first Read to the last completion; latency is per fetch, from its Read to its
// completion. The row reports the faster loop. Before each loop the slots are zeroed; after it
// each slot is compared (memcmp) with the chunk it fetched last. tcp/am and tcp/rma: UCX_TLS tcp
// on lo. shm/rma and shm/am: posix,cma,tcp. Baseline: ucx_perftest between two processes with
// the same UCX_TLS and UCX_NET_DEVICES, as many 32 MiB messages as the row's faster loop fetched
// (4 warm-up): ucp_am_bw for am rows, ucp_get for rma rows.
//
// Daemon rows ("daemons tcp": [remote] transports "tcp", net_devices "lo"; "daemons shm":
// transports "posix,cma,tcp"). Two stratad processes (tests/support/daemon_process.h), each with
// a host tier of max(1 GiB, --chunks + 4 chunks) in 2 MiB pages (the production page size; the
// arena is not prefaulted, the production default, unless --prefault) and the remote tier on: A
// dials nobody, B dials A, both share a cluster token. An engine session on A (RawEngineClient,
// layout Llama-3-8B geometry in 256-token chunks: 32 MiB each) stores --chunks chunks of one chain,
// chunk i filled with byte 0x40 + i. Then --repetitions times, on an engine session on B: Lookup
// until all chunks are found (at most 10 s; B's remote tier asks A), then one PrepareLoad of the
// chain, timed from its request to its response: B leases the chunks on A, reads them into its own
// arena over UCX (runs of 8 chunks), checks their checksums, commits them to its host tier and
// answers with leases. The request sets connector_verifies, as the connector does by default (it
// checks checksums during its own copy, which is not part of the fetch). GB/s = chunks x 32 MiB /
// 1e9 per second of the PrepareLoad. After each load every chunk's extents are checked in B's
// arena (the client maps it) at every 4 KiB and at the last byte, the leases are released, and
// B's host tier is cleared (control Clear, all, TIER_HOST) so the next load fetches again. The
// row reports the median and the best load; at the end B's peer counter must show every byte
// read from A. Baseline: ucx_perftest ucp_am_bw (the links take active messages, see
// storage/remote/data_path.h) with the same UCX_TLS and UCX_NET_DEVICES, chunks x repetitions
// messages of 32 MiB (4 warm-up). Daemon processes are killed if the bench gets SIGINT, SIGTERM
// or SIGHUP; every other child dies with the bench (PR_SET_PDEATHSIG).
//
// Targets: strata / ucx_perftest >= 0.8 (per row); strata / redis >= 1.5. Redis: a
// redis-server without persistence on 127.0.0.1 holds one 32 MiB value; GETs of it are timed on
// one connection, one in flight, with --iterations / --seconds bounds, the first one verified.
// Compared with it: the faster tcp transport row and the daemons tcp row (its median).
//
// Output: stdout carries one JSON object (as disk_tier_bench does); stderr carries the same
// figures as tables for a reader, and the notes. A baseline that cannot be measured (a tool
// missing, a tool failing) is null in the JSON with the reason among the notes. Exit status: 0
// when every Strata fetch completed and matched (missed targets included), 1 on a mismatch or
// a failed row, 2 on bad flags.
//
// Usage: remote_bench [--iterations=N] [--seconds=S] [--only=tcp|shm|transports|daemons]
//                     [--chunks=N] [--repetitions=N] [--daemon_logs] [--prefault]
// --daemon_logs writes both daemons' logs (debug level) to stderr after each daemon row;
// --prefault starts the daemons with [host] prefault = true (their arenas faulted in at start).
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <charconv>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <numeric>
#include <optional>
#include <regex>
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
#include "bench/support/model_layouts.h"
#include "bench/support/remote_baselines.h"
#include "core/fmt_absl.h"
#include "core/key_hasher.h"
#include "core/scoped_fd.h"
#include "core/status_macros.h"
#include "core/status_util.h"
#include "fmt/format.h"
#include "grpcpp/client_context.h"
#include "proto/convert.h"
#include "storage/remote/ucx_transport.h"
#include "tests/support/daemon_process.h"
#include "tests/support/raw_engine_client.h"

namespace strata::bench {
namespace {

using storage::remote::DataPath;
using storage::remote::PeerId;
using storage::remote::RequestId;
using storage::remote::Segment;
using storage::remote::Transport;
using storage::remote::UcxTransport;
using test_support::DaemonProcess;
using test_support::RawEngineClient;
using Clock = BenchClock;
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
constexpr auto kStopGrace = kChildStopGrace;
// Daemon rows: at most this many chunks per load (two arenas of about this many x 32 MiB).
constexpr uint64_t kMaxDaemonChunks = 64;
constexpr uint8_t kFirstFill = 0x40;

struct Flags {
  uint64_t iterations = 1000;  // fetches (or GETs) per timed loop, at most
  double seconds = 1.0;        // per timed loop, at most
  std::string only;            // "", "tcp", "shm", "transports" or "daemons"
  uint64_t chunks = 16;        // daemon rows: chunks per load
  uint64_t repetitions = 5;    // daemon rows: timed loads
  bool daemon_logs = false;
  bool prefault = false;  // daemon rows: [host] prefault (off in production by default)
  std::string serve;      // internal: run as the peer of this row
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

struct DaemonRow {
  std::string_view name;
  std::string_view family;
  std::string_view transports;
  std::string_view net_devices;
};

constexpr std::array<DaemonRow, 2> kDaemonRows = {{
    {"daemons tcp", "tcp", "tcp", "lo"},
    {"daemons shm", "shm", "posix,cma,tcp", ""},
}};

bool Selected(const Flags& flags, std::string_view family, std::string_view kind) {
  return flags.only.empty() || flags.only == family || flags.only == kind;
}

const Row* FindRow(std::string_view name) {
  for (const Row& row : kRows) {
    if (row.name == name) return &row;
  }
  return nullptr;
}

// --- The peer ------------------------------------------------------------------------------------

// The secret the bench's two transports authenticate their link with.
constexpr std::string_view kTransportSecret = "remote-bench transport secret";

// --serve=ROW: serves a 256 MiB patterned region until stdin closes. Returns the exit code.
int Serve(const Row& row) {
  std::vector<std::byte> region(kPeerChunks * kChunkBytes);
  FillPattern(region, 0);
  auto transport = UcxTransport::Create({.region = region,
                                         .cluster_secret = std::string(kTransportSecret),
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
                                                .cluster_secret = std::string(kTransportSecret),
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

// --- Daemons -------------------------------------------------------------------------------------

// The daemons running now, for the signal handler: stratad is started by DaemonProcess, not as
// a Child, so nothing else would stop it if a signal ended the bench.
std::array<std::atomic<pid_t>, 2> g_daemon_pids{};

void KillDaemonsAndReraise(int signal_number) {
  for (std::atomic<pid_t>& pid : g_daemon_pids) {
    const pid_t running = pid.load();
    if (running > 0) ::kill(running, SIGKILL);
  }
  ::signal(signal_number, SIG_DFL);
  ::raise(signal_number);
}

void InstallSignalHandlers() {
  struct sigaction action {};
  action.sa_handler = KillDaemonsAndReraise;
  sigemptyset(&action.sa_mask);
  for (const int signal_number : {SIGINT, SIGTERM, SIGHUP}) {
    ::sigaction(signal_number, &action, nullptr);
  }
}

// A cluster token in a file of its own under /tmp, removed on destruction. Move-only.
class TokenFile {
 public:
  static absl::StatusOr<TokenFile> Create() {
    std::string path = "/tmp/remote-bench-token-XXXXXX";
    ScopedFd fd(::mkstemp(path.data()));
    if (!fd.valid()) return ErrnoToStatus(errno, "mkstemp for the cluster token");
    const std::string token =
        fmt::format("remote-bench-{}-{}", ::getpid(), Clock::now().time_since_epoch().count());
    TokenFile file(path);
    if (::write(fd.get(), token.data(), token.size()) != static_cast<ssize_t>(token.size())) {
      return ErrnoToStatus(errno, fmt::format("write {}", path));
    }
    return file;
  }
  TokenFile(TokenFile&& other) noexcept : path_(std::exchange(other.path_, "")) {}
  TokenFile& operator=(TokenFile&&) = delete;
  ~TokenFile() {
    if (!path_.empty()) ::unlink(path_.c_str());
  }
  const std::string& path() const { return path_; }

 private:
  explicit TokenFile(std::string path) : path_(std::move(path)) {}
  std::string path_;
};

// A stratad with the remote tier on and an engine session (layout `layout`) on it. Destruction
// closes the session, then stops the daemon (SIGTERM, SIGKILL after kStopGrace) and reaps it.
// Not thread-safe.
class Daemon {
 public:
  static absl::StatusOr<std::unique_ptr<Daemon>> Start(const DaemonRow& row,
                                                       const std::string& token_file,
                                                       const std::vector<std::string>& peers,
                                                       const KvLayout& layout,
                                                       uint64_t capacity_bytes, bool prefault) {
    std::string peer_list;
    for (const std::string& peer : peers) peer_list += fmt::format("\"{}\", ", peer);
    test_support::DaemonProcessOptions options{
        .host_capacity = fmt::format("{}MiB", capacity_bytes >> 20),
        .page_bytes = "2MiB",
        .prefault = prefault,
        .extra_toml =
            fmt::format("[remote]\nlisten_address = \"127.0.0.1:0\"\ncluster_token_file = \"{}\"\n"
                        "transports = \"{}\"\nnet_devices = \"{}\"\nlookup_budget_us = 200000\n"
                        "peers = [{}]\n",
                        token_file, row.transports, row.net_devices, peer_list)};
    std::unique_ptr<Daemon> daemon(new Daemon());
    STRATA_ASSIGN_OR_RETURN(daemon->process_, DaemonProcess::Start(options));
    daemon->Register();
    STRATA_ASSIGN_OR_RETURN(daemon->remote_address_, daemon->AwaitRemoteAddress());
    daemon->engine_ = std::make_unique<RawEngineClient>(daemon->process_->engine_socket());
    if (!daemon->engine_->connected()) {
      return absl::UnavailableError(
          fmt::format("connect to {}", daemon->process_->engine_socket()));
    }
    STRATA_ASSIGN_OR_RETURN(const v1::EngineResponse shaken, daemon->engine_->Handshake(layout));
    STRATA_RETURN_IF_ERROR(Annotate(FromProto(shaken.status()), "engine handshake"));
    if (daemon->engine_->arena() == nullptr) {
      return absl::InternalError("engine handshake: the arena was not passed or not mapped");
    }
    daemon->arena_bytes_ = shaken.handshake().arena_size_bytes();
    return daemon;
  }

  ~Daemon() {
    engine_.reset();
    if (process_) process_->Stop(std::chrono::duration_cast<std::chrono::milliseconds>(kStopGrace));
    if (slot_) slot_->store(0);
  }

  DaemonProcess& process() { return *process_; }
  RawEngineClient& engine() { return *engine_; }
  std::span<const std::byte> arena() const { return {engine_->arena(), arena_bytes_}; }
  const std::string& remote_address() const { return remote_address_; }

 private:
  Daemon() = default;

  void Register() {
    for (std::atomic<pid_t>& pid : g_daemon_pids) {
      pid_t free = 0;
      if (pid.compare_exchange_strong(free, process_->pid())) {
        slot_ = &pid;
        return;
      }
    }
  }

  // "peers reach this node (NODE) on HOST:PORT" from the daemon's log.
  absl::StatusOr<std::string> AwaitRemoteAddress() {
    const std::regex listening(R"(peers reach this node \([^)]*\) on ([0-9.]+:[0-9]+))");
    const auto deadline = Clock::now() + kStartTimeout;
    while (true) {
      const std::string log = process_->Log();
      std::smatch match;
      if (std::regex_search(log, match, listening)) return match[1].str();
      if (Clock::now() >= deadline) {
        return absl::UnavailableError(
            fmt::format("stratad did not log where peers reach it within 10 s:\n{}", log));
      }
      std::this_thread::sleep_for(20ms);
    }
  }

  std::unique_ptr<DaemonProcess> process_;
  std::atomic<pid_t>* slot_ = nullptr;  // in g_daemon_pids
  std::string remote_address_;
  std::unique_ptr<RawEngineClient> engine_;
  uint64_t arena_bytes_ = 0;
};

struct DaemonResult {
  uint64_t chunks = 0;
  double store_s = 0;              // A: the Store of the chain (reserve, fill, commit)
  std::vector<double> lookup_s;    // B: until its Lookup found every chunk, per repetition
  std::vector<double> load_s;      // B: the PrepareLoad, per repetition
  std::vector<double> verify_s;    // the bench's byte check of B's arena, per repetition
  uint64_t bytes_read_from_a = 0;  // B's counter for its peer A, after the last load

  double GBps(double seconds) const {
    return seconds > 0 ? chunks * kChunkBytes / seconds / 1e9 : 0;
  }
  double median_s() const { return Median(load_s); }
  double best_s() const { return *std::min_element(load_s.begin(), load_s.end()); }
};

// Checks chunk `index` of a PrepareLoad answer: OK, 32 MiB in extents inside the arena, and
// `fill` at every 4 KiB of each extent and at its last byte.
absl::Status CheckPlacement(const v1::LoadPlacement& placement, size_t index, uint8_t fill,
                            std::span<const std::byte> arena) {
  STRATA_RETURN_IF_ERROR(Annotate(FromProto(placement.status()), fmt::format("chunk {}", index)));
  uint64_t total = 0;
  for (const v1::Extent& extent : placement.extents()) {
    if (extent.length() == 0 || extent.offset() > arena.size() ||
        extent.length() > arena.size() - extent.offset()) {
      return absl::InternalError(fmt::format("chunk {}: extent [{}, +{}) outside the {}-byte arena",
                                             index, extent.offset(), extent.length(),
                                             arena.size()));
    }
    const std::byte expected{fill};
    const std::byte* bytes = arena.data() + extent.offset();
    for (uint64_t at = 0; at < extent.length(); at += 4096) {
      if (bytes[at] != expected) {
        return absl::DataLossError(fmt::format("chunk {}: byte {} of an extent is {:#x}, not {:#x}",
                                               index, at, static_cast<int>(bytes[at]), fill));
      }
    }
    if (bytes[extent.length() - 1] != expected) {
      return absl::DataLossError(
          fmt::format("chunk {}: the last byte of an extent is not {:#x}", index, fill));
    }
    total += extent.length();
  }
  if (total != kChunkBytes || placement.size_bytes() != kChunkBytes) {
    return absl::DataLossError(fmt::format("chunk {}: {} bytes in extents, size_bytes {}, not {}",
                                           index, total, placement.size_bytes(), kChunkBytes));
  }
  return absl::OkStatus();
}

// B's Lookup of `keys` until every chunk is found; kDeadlineExceeded after 10 s.
absl::Status LookupAll(RawEngineClient& engine, std::span<const ChunkKey> keys) {
  const auto deadline = Clock::now() + 10s;
  uint32_t hits = 0;
  while (true) {
    STRATA_ASSIGN_OR_RETURN(const v1::EngineResponse found,
                            engine.Call(test_support::LookupRequest(keys)));
    STRATA_RETURN_IF_ERROR(Annotate(FromProto(found.status()), "lookup"));
    hits = found.lookup().hit_chunks();
    if (hits == keys.size()) return absl::OkStatus();
    if (Clock::now() >= deadline) {
      return absl::DeadlineExceededError(
          fmt::format("B's lookup found {} of {} chunks for 10 s", hits, keys.size()));
    }
    std::this_thread::sleep_for(25ms);
  }
}

absl::Status Release(RawEngineClient& engine, const std::vector<uint64_t>& handles) {
  v1::EngineRequest request;
  for (const uint64_t handle : handles) request.mutable_release()->add_handles(handle);
  STRATA_ASSIGN_OR_RETURN(const v1::EngineResponse released, engine.Call(std::move(request)));
  STRATA_RETURN_IF_ERROR(Annotate(FromProto(released.status()), "release"));
  for (const v1::Status& status : released.handles().statuses()) {
    STRATA_RETURN_IF_ERROR(Annotate(FromProto(status), "release"));
  }
  return absl::OkStatus();
}

// Removes every chunk of `daemon`'s host tier; kInternal unless that was `expected` chunks.
absl::Status ClearHostTier(DaemonProcess& daemon, uint64_t expected) {
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + kStartTimeout);
  v1::ClearRequest request;
  request.set_all(true);
  request.set_tier(v1::TIER_HOST);
  v1::ClearResponse response;
  const grpc::Status status = daemon.control().Clear(&context, request, &response);
  if (!status.ok()) return absl::UnavailableError(fmt::format("Clear: {}", status.error_message()));
  if (response.removed_chunks() != expected) {
    return absl::InternalError(
        fmt::format("Clear removed {} chunks, not {}", response.removed_chunks(), expected));
  }
  return absl::OkStatus();
}

// What B's peer list counts as read from `address`.
absl::StatusOr<uint64_t> BytesReadFrom(DaemonProcess& daemon, const std::string& address) {
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + kStartTimeout);
  v1::ListPeersResponse peers;
  const grpc::Status status = daemon.control().ListPeers(&context, v1::ListPeersRequest(), &peers);
  if (!status.ok()) {
    return absl::UnavailableError(fmt::format("ListPeers: {}", status.error_message()));
  }
  for (const v1::Peer& peer : peers.peers()) {
    if (peer.address() == address) return peer.bytes_read();
  }
  return absl::InternalError(fmt::format("B does not list its peer {}", address));
}

// A stores `keys`; B looks them up and loads them flags.repetitions times (see the top).
absl::StatusOr<DaemonResult> LoadRepeatedly(Daemon& a, Daemon& b, const KvLayout& layout,
                                            const std::vector<ChunkKey>& keys, const Flags& flags) {
  DaemonResult result{.chunks = keys.size()};
  const auto store_start = Clock::now();
  STRATA_ASSIGN_OR_RETURN(const std::vector<uint64_t> stored,
                          a.engine().Store(keys, layout.chunk_tokens, kFirstFill));
  result.store_s = Seconds(Clock::now() - store_start);
  if (stored.size() != keys.size()) {
    return absl::InternalError(
        fmt::format("A reserved {} of {} chunks", stored.size(), keys.size()));
  }
  for (uint64_t repetition = 0; repetition < flags.repetitions; ++repetition) {
    const auto lookup_start = Clock::now();
    STRATA_RETURN_IF_ERROR(LookupAll(b.engine(), keys));
    result.lookup_s.push_back(Seconds(Clock::now() - lookup_start));

    v1::EngineRequest request = test_support::PrepareLoadRequest(keys);
    request.mutable_prepare_load()->set_connector_verifies(true);
    const auto load_start = Clock::now();
    absl::StatusOr<v1::EngineResponse> loaded = b.engine().Call(std::move(request));
    const double load_s = Seconds(Clock::now() - load_start);
    if (!loaded.ok()) return Annotate(loaded.status(), "B's PrepareLoad");
    STRATA_RETURN_IF_ERROR(Annotate(FromProto(loaded->status()), "B's PrepareLoad"));
    const auto& placements = loaded->prepare_load().chunks();
    std::vector<uint64_t> handles;
    for (const v1::LoadPlacement& placement : placements) {
      if (placement.status().code() == 0) handles.push_back(placement.handle());
    }
    const auto verify_start = Clock::now();
    absl::Status checked = placements.size() == static_cast<int>(keys.size())
                               ? absl::OkStatus()
                               : absl::InternalError(fmt::format("{} placements for {} chunks",
                                                                 placements.size(), keys.size()));
    for (int i = 0; checked.ok() && i < placements.size(); ++i) {
      checked = CheckPlacement(placements[i], i, static_cast<uint8_t>(kFirstFill + i), b.arena());
    }
    result.verify_s.push_back(Seconds(Clock::now() - verify_start));
    const absl::Status released = Release(b.engine(), handles);
    STRATA_RETURN_IF_ERROR(Annotate(checked, fmt::format("load {}", repetition)));
    STRATA_RETURN_IF_ERROR(released);
    result.load_s.push_back(load_s);
    STRATA_RETURN_IF_ERROR(ClearHostTier(b.process(), keys.size()));
  }
  STRATA_ASSIGN_OR_RETURN(result.bytes_read_from_a, BytesReadFrom(b.process(), a.remote_address()));
  const uint64_t expected = flags.repetitions * keys.size() * kChunkBytes;
  if (result.bytes_read_from_a != expected) {
    return absl::InternalError(fmt::format("B counts {} bytes read from A, not the {} it loaded",
                                           result.bytes_read_from_a, expected));
  }
  return result;
}

absl::StatusOr<DaemonResult> MeasureDaemons(const DaemonRow& row, const Flags& flags) {
  const KvLayout layout = Llama8bLayout();
  if (layout.chunk_bytes(layout.chunk_tokens) != kChunkBytes) {
    return absl::InternalError("the Llama-3-8B layout's chunk is not 32 MiB");
  }
  STRATA_ASSIGN_OR_RETURN(const KeyHasher hasher, KeyHasher::Create(layout, {}));
  std::vector<uint32_t> tokens(flags.chunks * layout.chunk_tokens);
  std::iota(tokens.begin(), tokens.end(), 1000u);
  const std::vector<ChunkKey> keys = hasher.PrefixKeys(tokens, {});
  const uint64_t capacity_bytes = std::max<uint64_t>(1ull << 30, (flags.chunks + 4) * kChunkBytes);
  STRATA_ASSIGN_OR_RETURN(const TokenFile token, TokenFile::Create());
  STRATA_ASSIGN_OR_RETURN(std::unique_ptr<Daemon> a, Daemon::Start(row, token.path(), {}, layout,
                                                                   capacity_bytes, flags.prefault));
  STRATA_ASSIGN_OR_RETURN(std::unique_ptr<Daemon> b,
                          Daemon::Start(row, token.path(), {a->remote_address()}, layout,
                                        capacity_bytes, flags.prefault));
  absl::StatusOr<DaemonResult> result = LoadRepeatedly(*a, *b, layout, keys, flags);
  if (flags.daemon_logs) {
    fmt::print(stderr, "--- {}: A's log ---\n{}--- {}: B's log ---\n{}--- end of logs ---\n",
               row.name, a->process().Log(), row.name, b->process().Log());
  }
  b.reset();
  a.reset();
  return result;
}

// --- Report --------------------------------------------------------------------------------------

// What the run found, for the JSON object at the end.
struct Report {
  std::vector<std::string> transport_rows;
  std::vector<std::string> daemon_rows;
  std::vector<std::string> redis_comparisons;
  std::vector<std::string> notes;
  bool failed = false;
};

constexpr std::string_view kRowFormat =
    "{:<8} {:>6} {:>7} {:>9}  {:<13} {:<13}  {:<22} {:>6} {:>6} {:>7}\n";
constexpr std::string_view kDaemonFormat =
    "{:<12} {:>6} {:>4}  {:<16} {:<16}  {:<22} {:>6} {:>6} {:>6} {:>7}\n";

std::string Loop(const LoopStats& stats) {
  return fmt::format("{:.2f} ({:.1f})", stats.GBps(), stats.p50_s * 1e3);
}

std::string LoopJson(const LoopStats& stats) {
  return fmt::format(
      "{{\"in_flight\": {}, \"fetches\": {}, \"seconds\": {}, \"GBps\": {}, \"p50_ms\": {}}}",
      stats.in_flight, stats.fetches, JsonNumber(stats.seconds, 4), JsonNumber(stats.GBps()),
      JsonNumber(stats.p50_s * 1e3));
}

std::string SecondsJson(const std::vector<double>& values) {
  std::string out = "[";
  for (size_t i = 0; i < values.size(); ++i) {
    out += fmt::format("{}{}", i > 0 ? ", " : "", JsonNumber(values[i], 4));
  }
  return out + "]";
}

std::string JsonList(const std::vector<std::string>& items, std::string_view indent) {
  if (items.empty()) return "[]";
  std::string out = "[\n";
  for (size_t i = 0; i < items.size(); ++i) {
    out += fmt::format("{}  {}{}\n", indent, items[i], i + 1 < items.size() ? "," : "");
  }
  return out + fmt::format("{}]", indent);
}

void PrintHeader() {
  fmt::print(stderr,
             "remote_bench: 32 MiB chunk fetches from a peer process; GB/s = 1e9 bytes/s\n"
             "machine: nproc={}, {}\n\n",
             std::thread::hardware_concurrency(), CpuModel());
}

void PrintTransportHeader(const Flags& flags) {
  fmt::print(stderr,
             "transport rows: UcxTransport between two processes, 16 x 2 MiB segments per fetch; "
             "each timed loop: at most {} fetches or {:.1f} s\n"
             "p50 = median latency of one 32 MiB fetch; N: = N fetches in flight; the row takes "
             "the faster\n",
             flags.iterations, flags.seconds);
  fmt::print(stderr, kRowFormat, "row", "GB/s", "p50_ms", "in_flight", "1: GB/s (ms)",
             fmt::format("{}: GB/s (ms)", kMaxInFlight), "baseline", "GB/s", "ratio", "target");
}

void PrintDaemonHeader(const Flags& flags) {
  fmt::print(stderr,
             "\ndaemon rows: stratad B promotes {} chunks ({} MiB) from stratad A over its remote "
             "tier in one PrepareLoad; {} loads\n"
             "GB/s (ms) = bytes / time of the PrepareLoad (ms); ratio = median load's, (best) = "
             "best load's\n",
             flags.chunks, flags.chunks * (kChunkBytes >> 20), flags.repetitions);
  fmt::print(stderr, kDaemonFormat, "row", "chunks", "reps", "median GB/s (ms)", "best GB/s (ms)",
             "baseline", "GB/s", "ratio", "(best)", "target");
}

void ReportTransportRow(const Row& row, const StrataResult& result,
                        const absl::StatusOr<double>& perftest, Report& report) {
  const LoopStats& best = result.best();
  fmt::print(stderr, kRowFormat, row.name, fmt::format("{:.2f}", best.GBps()),
             fmt::format("{:.1f}", best.p50_s * 1e3), best.in_flight, Loop(result.one),
             Loop(result.pipelined), fmt::format("ucx_perftest {}", row.perftest_test),
             FormatBaseline(perftest), FormatRatio(best.GBps(), perftest), ">=0.8x");
  report.transport_rows.push_back(fmt::format(
      "{{\"row\": {}, \"transports\": {}, \"net_devices\": {}, \"GBps\": {}, \"p50_ms\": {}, "
      "\"in_flight\": {}, \"loops\": [{}, {}], \"perftest_test\": {}, \"perftest_GBps\": {}, "
      "\"ratio_perftest\": {}, \"target_perftest\": 0.8}}",
      JsonString(row.name), JsonString(row.transports), JsonString(row.net_devices),
      JsonNumber(best.GBps()), JsonNumber(best.p50_s * 1e3), best.in_flight, LoopJson(result.one),
      LoopJson(result.pipelined), JsonString(row.perftest_test), JsonBaseline(perftest),
      JsonRatio(best.GBps(), perftest)));
}

void ReportDaemonRow(const DaemonRow& row, const DaemonResult& result,
                     const absl::StatusOr<double>& perftest, Report& report) {
  const double median = result.GBps(result.median_s());
  const double best = result.GBps(result.best_s());
  fmt::print(stderr, kDaemonFormat, row.name, result.chunks, result.load_s.size(),
             fmt::format("{:.2f} ({:.1f})", median, result.median_s() * 1e3),
             fmt::format("{:.2f} ({:.1f})", best, result.best_s() * 1e3), "ucx_perftest ucp_am_bw",
             FormatBaseline(perftest), FormatRatio(median, perftest), FormatRatio(best, perftest),
             ">=0.8x");
  report.daemon_rows.push_back(fmt::format(
      "{{\"row\": {}, \"transports\": {}, \"net_devices\": {}, \"chunks\": {}, "
      "\"median_GBps\": {}, \"best_GBps\": {}, \"load_s\": {}, \"lookup_s\": {}, "
      "\"verify_s\": {}, \"store_s\": {}, \"bytes_read_from_peer\": {}, "
      "\"perftest_test\": \"ucp_am_bw\", \"perftest_GBps\": {}, \"ratio_perftest_median\": {}, "
      "\"ratio_perftest_best\": {}, \"target_perftest\": 0.8}}",
      JsonString(row.name), JsonString(row.transports), JsonString(row.net_devices), result.chunks,
      JsonNumber(median), JsonNumber(best), SecondsJson(result.load_s),
      SecondsJson(result.lookup_s), SecondsJson(result.verify_s), JsonNumber(result.store_s, 4),
      result.bytes_read_from_a, JsonBaseline(perftest), JsonRatio(median, perftest),
      JsonRatio(best, perftest)));
}

// Strata's `gbps` (row `name`) against Redis, for the JSON object.
void ReportRedisComparison(std::string_view name, double gbps,
                           const absl::StatusOr<RedisStats>& redis, Report& report) {
  const absl::StatusOr<double> redis_gbps =
      redis.ok() ? absl::StatusOr<double>(redis->GBps()) : redis.status();
  report.redis_comparisons.push_back(fmt::format(
      "{{\"row\": {}, \"GBps\": {}, \"redis_GBps\": {}, \"ratio\": {}, \"target\": 1.5}}",
      JsonString(name), JsonNumber(gbps), JsonBaseline(redis_gbps), JsonRatio(gbps, redis_gbps)));
}

std::string RedisCell(const absl::StatusOr<RedisStats>& redis) {
  return redis.ok() ? fmt::format("redis GET, p50 {:.1f} ms", redis->p50_s * 1e3)
                    : std::string("redis GET");
}

absl::StatusOr<double> RedisGBps(const absl::StatusOr<RedisStats>& redis) {
  return redis.ok() ? absl::StatusOr<double>(redis->GBps()) : redis.status();
}

void PrintJson(const Flags& flags, const absl::StatusOr<RedisStats>& redis, const Report& report) {
  std::vector<std::string> notes;
  for (const std::string& note : report.notes) notes.push_back(JsonString(note));
  const std::string redis_json =
      redis.ok() ? fmt::format("{{\"GBps\": {}, \"p50_ms\": {}, \"gets\": {}, \"seconds\": {}}}",
                               JsonNumber(redis->GBps()), JsonNumber(redis->p50_s * 1e3),
                               redis->gets, JsonNumber(redis->seconds, 4))
                 : std::string("null");
  fmt::print(
      "{{\n"
      "  \"bench\": \"remote_bench\", \"chunk_bytes\": {}, \"nproc\": {}, \"cpu\": {},\n"
      "  \"bounds\": {{\"iterations\": {}, \"seconds\": {}, \"chunks\": {}, \"repetitions\": {}, "
      "\"prefault\": {}}},\n"
      "  \"transport_rows\": {},\n"
      "  \"daemon_rows\": {},\n"
      "  \"redis\": {},\n"
      "  \"redis_comparisons\": {},\n"
      "  \"notes\": {},\n"
      "  \"failed\": {}\n"
      "}}\n",
      kChunkBytes, std::thread::hardware_concurrency(), JsonString(CpuModel()), flags.iterations,
      JsonNumber(flags.seconds, 2), flags.chunks, flags.repetitions, flags.prefault,
      JsonList(report.transport_rows, "  "), JsonList(report.daemon_rows, "  "), redis_json,
      JsonList(report.redis_comparisons, "  "), JsonList(notes, "  "), report.failed);
}

int Main(const Flags& flags) {
  InstallSignalHandlers();
  PrintHeader();
  Report report;
  // Redis first: both tables compare their tcp rows with it.
  absl::StatusOr<RedisStats> redis = absl::FailedPreconditionError("no tcp row selected");
  if (Selected(flags, "tcp", "transports") || Selected(flags, "tcp", "daemons")) {
    redis = MeasureRedis(
        {.value_bytes = kChunkBytes,
         .max_gets = flags.iterations,
         .max_time = Duration(flags.seconds),
         .io_timeout = std::chrono::duration_cast<std::chrono::seconds>(kFetchTimeout)});
    if (!redis.ok()) report.notes.push_back(fmt::format("redis: {}", redis.status()));
  }

  std::optional<std::pair<std::string_view, LoopStats>> best_tcp;
  if (std::any_of(kRows.begin(), kRows.end(),
                  [&](const Row& row) { return Selected(flags, row.family, "transports"); })) {
    PrintTransportHeader(flags);
  }
  for (const Row& row : kRows) {
    if (!Selected(flags, row.family, "transports")) continue;
    const absl::StatusOr<StrataResult> strata = MeasureStrata(row, flags);
    if (!strata.ok()) {
      report.failed = true;
      fmt::print(stderr, "{:<8} FAILED: {}\n", row.name, strata.status());
      report.transport_rows.push_back(fmt::format("{{\"row\": {}, \"error\": {}}}",
                                                  JsonString(row.name),
                                                  JsonString(strata.status().ToString())));
      continue;
    }
    const absl::StatusOr<double> perftest = MeasurePerftest(
        {.test = std::string(row.perftest_test),
         .transports = std::string(row.transports),
         .net_devices = std::string(row.net_devices),
         .message_bytes = kChunkBytes,
         .messages = std::max(strata->best().fetches, kWarmupFetches * 4),
         .warmup = kWarmupFetches,
         // As many bytes as Strata moved in at most --seconds: allow for a baseline 10x slower.
         .timeout = kStartTimeout + 10 * Duration(flags.seconds)});
    if (!perftest.ok()) {
      report.notes.push_back(fmt::format("{} baseline: {}", row.name, perftest.status()));
    }
    ReportTransportRow(row, *strata, perftest, report);
    if (row.family == "tcp" && (!best_tcp || strata->best().GBps() > best_tcp->second.GBps())) {
      best_tcp.emplace(row.name, strata->best());
    }
  }
  if (best_tcp) {
    const LoopStats& tcp = best_tcp->second;
    fmt::print(stderr, kRowFormat, "redis", fmt::format("{:.2f}", tcp.GBps()),
               fmt::format("{:.1f}", tcp.p50_s * 1e3), tcp.in_flight,
               fmt::format("(as {})", best_tcp->first), "", RedisCell(redis),
               FormatBaseline(RedisGBps(redis)), FormatRatio(tcp.GBps(), RedisGBps(redis)),
               ">=1.5x");
    ReportRedisComparison(best_tcp->first, tcp.GBps(), redis, report);
  }

  std::optional<std::pair<std::string_view, DaemonResult>> daemons_tcp;
  if (std::any_of(kDaemonRows.begin(), kDaemonRows.end(),
                  [&](const DaemonRow& row) { return Selected(flags, row.family, "daemons"); })) {
    PrintDaemonHeader(flags);
  }
  for (const DaemonRow& row : kDaemonRows) {
    if (!Selected(flags, row.family, "daemons")) continue;
    const absl::StatusOr<DaemonResult> strata = MeasureDaemons(row, flags);
    if (!strata.ok()) {
      report.failed = true;
      fmt::print(stderr, "{:<12} FAILED: {}\n", row.name, strata.status());
      report.daemon_rows.push_back(fmt::format("{{\"row\": {}, \"error\": {}}}",
                                               JsonString(row.name),
                                               JsonString(strata.status().ToString())));
      continue;
    }
    const double loads_s = std::accumulate(strata->load_s.begin(), strata->load_s.end(), 0.0);
    const absl::StatusOr<double> perftest =
        MeasurePerftest({.test = "ucp_am_bw",
                         .transports = std::string(row.transports),
                         .net_devices = std::string(row.net_devices),
                         .message_bytes = kChunkBytes,
                         .messages = std::max(flags.chunks * flags.repetitions, kWarmupFetches * 4),
                         .warmup = kWarmupFetches,
                         // Allow for a baseline 10x slower than the daemons.
                         .timeout = kStartTimeout + 10 * Duration(loads_s)});
    if (!perftest.ok()) {
      report.notes.push_back(fmt::format("{} baseline: {}", row.name, perftest.status()));
    }
    ReportDaemonRow(row, *strata, perftest, report);
    if (row.family == "tcp") daemons_tcp.emplace(row.name, *strata);
  }
  if (daemons_tcp) {
    const DaemonResult& tcp = daemons_tcp->second;
    const double median = tcp.GBps(tcp.median_s());
    const double best = tcp.GBps(tcp.best_s());
    fmt::print(stderr, kDaemonFormat, "redis", "", "", fmt::format("(as {})", daemons_tcp->first),
               "", RedisCell(redis), FormatBaseline(RedisGBps(redis)),
               FormatRatio(median, RedisGBps(redis)), FormatRatio(best, RedisGBps(redis)),
               ">=1.5x");
    ReportRedisComparison(daemons_tcp->first, median, redis, report);
  }
  if (!best_tcp && !daemons_tcp) {
    report.notes.emplace_back("no redis comparison: it compares with a tcp row, and none ran");
  }
  for (const std::string& note : report.notes) fmt::print(stderr, "note: {}\n", note);
  PrintJson(flags, redis, report);
  return report.failed ? 1 : 0;
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
    if (name == "--daemon_logs" || name == "--prefault") {
      (name == "--prefault" ? flags.prefault : flags.daemon_logs) =
          eq == std::string_view::npos || arg.substr(eq + 1) == "true";
      continue;
    }
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
      ok = value == "tcp" || value == "shm" || value == "transports" || value == "daemons";
    } else if (name == "--chunks") {
      ok = ParseNumber(value, flags.chunks) && flags.chunks <= kMaxDaemonChunks;
    } else if (name == "--repetitions") {
      ok = ParseNumber(value, flags.repetitions) && flags.repetitions <= 100;
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
    fmt::print(stderr,
               "usage: {} [--iterations=N] [--seconds=S] [--only=tcp|shm|transports|daemons] "
               "[--chunks=N (<= {})] [--repetitions=N (<= 100)] [--daemon_logs] [--prefault]\n",
               argv[0], strata::bench::kMaxDaemonChunks);
    return 2;
  }
  if (!flags->serve.empty()) return strata::bench::Serve(*strata::bench::FindRow(flags->serve));
  return strata::bench::Main(*flags);
}
