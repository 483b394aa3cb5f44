#include "bench/support/remote_baselines.h"

#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>

#include <algorithm>
#include <array>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <thread>
#include <utility>

#include "core/status_macros.h"
#include "core/status_util.h"
#include "fmt/format.h"

extern char** environ;

namespace strata::bench {
namespace {

using namespace std::chrono_literals;

std::vector<char*> CStrings(const std::vector<std::string>& strings) {
  std::vector<char*> pointers;
  for (const std::string& s : strings) pointers.push_back(const_cast<char*>(s.c_str()));
  pointers.push_back(nullptr);
  return pointers;
}

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

// Runs the ucx_perftest client once; its stdout and stderr.
absl::StatusOr<std::string> RunPerftestClient(const std::string& path,
                                              const std::vector<std::string>& args,
                                              const std::vector<std::string>& env,
                                              BenchClock::time_point deadline) {
  STRATA_ASSIGN_OR_RETURN(Pipe out, MakePipe());
  STRATA_ASSIGN_OR_RETURN(
      Child client,
      Child::Spawn(path, args, env, {.out = out.write.get(), .err = out.write.get()}));
  out.write.Reset();
  absl::StatusOr<std::string> text = ReadOutput(out.read.get(), deadline, nullptr);
  client.WaitFor(kChildStopGrace);
  return text;
}

absl::StatusOr<RedisStats> TimeGets(RespClient& client, const RedisOptions& options) {
  std::vector<std::byte> value(options.value_bytes);
  FillPattern(value, 0);
  STRATA_RETURN_IF_ERROR(client.Set("chunk", value));
  std::vector<std::byte> got(options.value_bytes);
  STRATA_RETURN_IF_ERROR(client.Get("chunk", got));
  STRATA_RETURN_IF_ERROR(CompareBytes(got, value, "redis GET"));
  std::vector<double> latencies_s;
  const auto start = BenchClock::now();
  const auto stop_at = start + options.max_time;
  auto now = start;
  while (latencies_s.size() < options.max_gets && now < stop_at) {
    STRATA_RETURN_IF_ERROR(client.Get("chunk", got));
    const auto done = BenchClock::now();
    latencies_s.push_back(Seconds(done - now));
    now = done;
  }
  return RedisStats{.value_bytes = options.value_bytes,
                    .gets = latencies_s.size(),
                    .seconds = Seconds(now - start),
                    .p50_s = Median(latencies_s)};
}

}  // namespace

double Seconds(BenchClock::duration d) { return std::chrono::duration<double>(d).count(); }

BenchClock::duration Duration(double seconds) {
  return std::chrono::duration_cast<BenchClock::duration>(std::chrono::duration<double>(seconds));
}

double Median(std::vector<double> values) {
  if (values.empty()) return 0;
  const auto middle = values.begin() + values.size() / 2;
  std::nth_element(values.begin(), middle, values.end());
  return *middle;
}

// --- Bytes ---------------------------------------------------------------------------------------

void FillPattern(std::span<std::byte> bytes, uint64_t first_offset) {
  for (uint64_t i = 0; i + 8 <= bytes.size(); i += 8) {
    const uint64_t word = ((first_offset + i) / 8 + 1) * 0x9E3779B97F4A7C15ull;
    std::memcpy(bytes.data() + i, &word, sizeof(word));
  }
}

absl::Status CompareBytes(std::span<const std::byte> got, std::span<const std::byte> expected,
                          std::string_view what) {
  if (std::memcmp(got.data(), expected.data(), expected.size()) == 0) return absl::OkStatus();
  const auto [at, unused] = std::mismatch(expected.begin(), expected.end(), got.begin());
  return absl::DataLossError(
      fmt::format("{}: bytes differ from the source at offset {}", what, at - expected.begin()));
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

std::vector<std::string> Environment() {
  std::vector<std::string> env;
  for (char** entry = environ; *entry != nullptr; ++entry) env.emplace_back(*entry);
  return env;
}

std::vector<std::string> UcxEnvironment(std::string_view transports, std::string_view net_devices) {
  std::vector<std::string> env;
  for (char** entry = environ; *entry != nullptr; ++entry) {
    const std::string_view text = *entry;
    if (!text.starts_with("UCX_TLS=") && !text.starts_with("UCX_NET_DEVICES=")) {
      env.emplace_back(text);
    }
  }
  if (!transports.empty()) env.push_back(fmt::format("UCX_TLS={}", transports));
  if (!net_devices.empty()) env.push_back(fmt::format("UCX_NET_DEVICES={}", net_devices));
  return env;
}

absl::StatusOr<Pipe> MakePipe() {
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) return ErrnoToStatus(errno, "pipe2");
  return Pipe{ScopedFd(fds[0]), ScopedFd(fds[1])};
}

absl::StatusOr<Child> Child::Spawn(const std::string& path, const std::vector<std::string>& args,
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

Child::Child(Child&& other) noexcept
    : pid_(std::exchange(other.pid_, -1)), exit_code_(other.exit_code_) {}

Child::~Child() { Stop(0ms); }

std::optional<int> Child::WaitFor(BenchClock::duration limit) {
  if (pid_ <= 0) return exit_code_;
  const auto deadline = BenchClock::now() + limit;
  int status = 0;
  while (true) {
    const pid_t reaped = ::waitpid(pid_, &status, WNOHANG);
    if (reaped == pid_) break;
    if (reaped < 0 && errno != EINTR) {  // not our child any more: nothing left to wait for
      pid_ = -1;
      return exit_code_;
    }
    if (BenchClock::now() >= deadline) return std::nullopt;
    std::this_thread::sleep_for(2ms);
  }
  pid_ = -1;
  exit_code_ = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  return exit_code_;
}

void Child::Stop(BenchClock::duration grace) {
  if (pid_ <= 0) return;
  ::kill(pid_, SIGTERM);
  if (WaitFor(grace)) return;
  ::kill(pid_, SIGKILL);
  int status = 0;
  while (::waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
  }
  pid_ = -1;
  exit_code_ = 128 + SIGKILL;
}

absl::StatusOr<std::string> ReadOutput(int fd, BenchClock::time_point deadline,
                                       const std::function<bool(std::string_view)>& enough) {
  std::string text;
  while (!enough || !enough(text)) {
    const auto left = std::chrono::ceil<std::chrono::milliseconds>(deadline - BenchClock::now());
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

// --- ucx_perftest --------------------------------------------------------------------------------

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

absl::StatusOr<double> MeasurePerftest(const PerftestOptions& options) {
  const std::optional<std::string> path = FindExecutable("ucx_perftest");
  if (!path) return absl::UnavailableError("ucx_perftest is not on PATH (Debian: ucx-utils)");
  const auto deadline = BenchClock::now() + options.timeout;
  STRATA_ASSIGN_OR_RETURN(const uint16_t port, FreePort());
  const std::vector<std::string> env = UcxEnvironment(options.transports, options.net_devices);
  STRATA_ASSIGN_OR_RETURN(Child server,
                          Child::Spawn(*path, {*path, "-p", std::to_string(port)}, env, {}));
  const std::vector<std::string> args = {*path, "127.0.0.1",
                                         "-p",  std::to_string(port),
                                         "-t",  options.test,
                                         "-s",  std::to_string(options.message_bytes),
                                         "-n",  std::to_string(options.messages),
                                         "-w",  std::to_string(options.warmup)};
  absl::StatusOr<std::string> output;
  do {  // until the server listens
    std::this_thread::sleep_for(20ms);
    output = RunPerftestClient(*path, args, env, deadline);
  } while (output.ok() && output->find("connect() failed") != std::string::npos &&
           !server.WaitFor(0s) && BenchClock::now() < deadline);
  server.WaitFor(kChildStopGrace);
  server.Stop(0s);
  STRATA_RETURN_IF_ERROR(output.status());
  return ParsePerftestBandwidth(*output);
}

// --- Redis ---------------------------------------------------------------------------------------

absl::StatusOr<RespClient> RespClient::Connect(uint16_t port, Child& server,
                                               BenchClock::time_point deadline,
                                               std::chrono::seconds io_timeout) {
  while (true) {
    ScopedFd fd(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
    if (!fd.valid()) return ErrnoToStatus(errno, "socket");
    const sockaddr_in address{
        .sin_family = AF_INET, .sin_port = htons(port), .sin_addr = {htonl(INADDR_LOOPBACK)}};
    if (::connect(fd.get(), reinterpret_cast<const sockaddr*>(&address), sizeof(address)) == 0) {
      const timeval timeout{.tv_sec = io_timeout.count(), .tv_usec = 0};
      const int one = 1;
      ::setsockopt(fd.get(), SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof(timeout));
      ::setsockopt(fd.get(), SOL_SOCKET, SO_SNDTIMEO, &timeout, sizeof(timeout));
      ::setsockopt(fd.get(), IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
      return RespClient(std::move(fd));
    }
    if (const auto code = server.WaitFor(0s)) {
      return absl::UnavailableError(fmt::format("redis-server exited with status {}", *code));
    }
    if (BenchClock::now() >= deadline) return ErrnoToStatus(errno, "connect to redis-server");
    std::this_thread::sleep_for(10ms);
  }
}

absl::Status RespClient::Set(std::string_view key, std::span<const std::byte> value) {
  STRATA_RETURN_IF_ERROR(
      Send(fmt::format("*3\r\n$3\r\nSET\r\n${}\r\n{}\r\n${}\r\n", key.size(), key, value.size())));
  STRATA_RETURN_IF_ERROR(Send({reinterpret_cast<const char*>(value.data()), value.size()}));
  STRATA_RETURN_IF_ERROR(Send("\r\n"));
  STRATA_ASSIGN_OR_RETURN(const std::string reply, ReadLine());
  if (reply != "+OK") return absl::InternalError(fmt::format("redis SET: {}", reply));
  return absl::OkStatus();
}

absl::Status RespClient::Get(std::string_view key, std::span<std::byte> out) {
  STRATA_RETURN_IF_ERROR(Send(fmt::format("*2\r\n$3\r\nGET\r\n${}\r\n{}\r\n", key.size(), key)));
  STRATA_ASSIGN_OR_RETURN(const std::string header, ReadLine());
  if (header != fmt::format("${}", out.size())) {
    return absl::InternalError(fmt::format("redis GET: reply {} for {} bytes", header, out.size()));
  }
  STRATA_RETURN_IF_ERROR(Receive(out));
  std::array<std::byte, 2> end;
  STRATA_RETURN_IF_ERROR(Receive(end));
  if (end[0] != std::byte{'\r'} || end[1] != std::byte{'\n'}) {
    return absl::InternalError("redis GET: the bulk string does not end in CRLF");
  }
  return absl::OkStatus();
}

absl::Status RespClient::Send(std::string_view bytes) {
  while (!bytes.empty()) {
    const ssize_t n = ::send(fd_.get(), bytes.data(), bytes.size(), MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return ErrnoToStatus(errno, "send to redis-server");
    bytes.remove_prefix(static_cast<size_t>(n));
  }
  return absl::OkStatus();
}

absl::Status RespClient::Receive(std::span<std::byte> out) {
  const size_t buffered = std::min(out.size(), buffered_.size());
  std::memcpy(out.data(), buffered_.data(), buffered);
  buffered_.erase(0, buffered);
  for (size_t done = buffered; done < out.size();) {
    const ssize_t n = ::recv(fd_.get(), out.data() + done, out.size() - done, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      return n == 0 ? absl::UnavailableError("redis-server closed the connection")
                    : ErrnoToStatus(errno, "receive from redis-server");
    }
    done += static_cast<size_t>(n);
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> RespClient::ReadLine() {
  while (buffered_.find("\r\n") == std::string::npos) {
    std::array<char, 4096> chunk;
    const ssize_t n = ::recv(fd_.get(), chunk.data(), chunk.size(), 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      return n == 0 ? absl::UnavailableError("redis-server closed the connection")
                    : ErrnoToStatus(errno, "receive from redis-server");
    }
    buffered_.append(chunk.data(), static_cast<size_t>(n));
  }
  const size_t end = buffered_.find("\r\n");
  std::string line = buffered_.substr(0, end);
  buffered_.erase(0, end + 2);
  return line;
}

absl::StatusOr<RedisStats> MeasureRedis(const RedisOptions& options) {
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
    STRATA_ASSIGN_OR_RETURN(
        RespClient client,
        RespClient::Connect(port, server, BenchClock::now() + 10s, options.io_timeout));
    return TimeGets(client, options);
  }();
  server.Stop(kChildStopGrace);
  return stats;
}

// --- Reports -------------------------------------------------------------------------------------

std::string CpuModel() {
  std::ifstream cpuinfo("/proc/cpuinfo");
  for (std::string line; std::getline(cpuinfo, line);) {
    if (line.starts_with("model name")) return line.substr(line.find(':') + 2);
  }
  return "unknown cpu";
}

std::string FormatRatio(double strata, const absl::StatusOr<double>& baseline) {
  return baseline.ok() && *baseline > 0 ? fmt::format("{:.2f}x", strata / *baseline) : "n/a";
}

std::string FormatBaseline(const absl::StatusOr<double>& baseline) {
  return baseline.ok() ? fmt::format("{:.2f}", *baseline) : "n/a";
}

std::string JsonString(std::string_view text) {
  std::string out = "\"";
  for (const char c : text) {
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\t':
        out += "\\t";
        break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          out += fmt::format("\\u{:04x}", static_cast<unsigned char>(c));
        } else {
          out += c;
        }
    }
  }
  out += '"';
  return out;
}

std::string JsonNumber(double value, int decimals) {
  return std::isfinite(value) ? fmt::format("{:.{}f}", value, decimals) : "null";
}

std::string JsonBaseline(const absl::StatusOr<double>& baseline) {
  return baseline.ok() ? JsonNumber(*baseline) : "null";
}

std::string JsonRatio(double strata, const absl::StatusOr<double>& baseline) {
  return baseline.ok() && *baseline > 0 ? JsonNumber(strata / *baseline) : "null";
}

}  // namespace strata::bench
