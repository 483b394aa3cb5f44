#include "tests/support/daemon_process.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fstream>
#include <regex>
#include <sstream>
#include <thread>

#include "fmt/format.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/security/credentials.h"

namespace strata::test_support {
namespace {

using std::chrono::milliseconds;
using Clock = std::chrono::steady_clock;

}  // namespace

absl::StatusOr<std::unique_ptr<DaemonProcess>> DaemonProcess::Start(DaemonProcessOptions options) {
  std::unique_ptr<DaemonProcess> daemon(new DaemonProcess());
  char tmpl[] = "/tmp/strata-itest-XXXXXX";
  if (::mkdtemp(tmpl) == nullptr) return absl::InternalError("mkdtemp failed");
  daemon->dir_ = tmpl;
  daemon->engine_socket_ = options.engine_socket.empty() ? (daemon->dir_ / "engine.sock").string()
                                                         : options.engine_socket;
  {
    std::ofstream config(daemon->dir_ / "stratad.toml");
    config << fmt::format(
        "[host]\ncapacity_bytes = \"{}\"\npage_bytes = \"{}\"\nlease_ms = {}\nprefault = {}\n"
        "background_prefault = {}\n"
        "[engine]\nsocket_path = \"{}\"\n"
        "[control]\nlisten_address = \"127.0.0.1:0\"\nunix_socket_path = \"{}\"\n{}"
        "[log]\nlevel = \"debug\"\n",
        options.host_capacity, options.page_bytes, options.lease_ms, options.prefault,
        options.background_prefault, daemon->engine_socket_,
        (daemon->dir_ / "control.sock").string(),
        options.event_ring_capacity == 0
            ? ""
            : fmt::format("event_ring_capacity = {}\n", options.event_ring_capacity));
    // No /metrics unless a test asks (its own [metrics] or --metrics-listen): daemons of tests
    // running side by side would contend for the default port.
    if (options.extra_toml.find("[metrics]") == std::string::npos) {
      config << "[metrics]\nlisten_address = \"\"\n";
    }
    config << options.extra_toml;
  }
  std::vector<std::string> args = {STRATA_STRATAD_PATH, "--config",
                                   (daemon->dir_ / "stratad.toml").string()};
  args.insert(args.end(), options.extra_args.begin(), options.extra_args.end());
  if (!options.network_namespace.empty()) {
    // `ip netns exec` enters the namespace and remounts /sys for it, where UCX finds its network
    // devices; it then execs stratad (same pid).
    args.insert(args.begin(), {"/usr/sbin/ip", "netns", "exec", options.network_namespace});
  }
  const std::string log_path = (daemon->dir_ / "stratad.log").string();
  const pid_t pid = ::fork();
  if (pid < 0) return absl::InternalError("fork failed");
  if (pid == 0) {
    std::vector<char*> argv;
    for (std::string& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    FILE* log = std::freopen(log_path.c_str(), "w", stderr);
    if (log == nullptr) _exit(126);

    ::execv(argv[0], argv.data());
    _exit(127);
  }
  daemon->pid_ = pid;

  // The daemon logs "control on 127.0.0.1:PORT" once it serves.
  const std::regex serving(R"(control on 127\.0\.0\.1:(\d+))");
  const auto deadline = Clock::now() + options.start_timeout;
  while (Clock::now() < deadline) {
    std::smatch match;
    const std::string log = daemon->Log();
    if (std::regex_search(log, match, serving)) {
      // Loopback in another network namespace is not ours: dial its Unix socket there.
      daemon->control_target_ = options.network_namespace.empty()
                                    ? "127.0.0.1:" + match[1].str()
                                    : "unix:" + (daemon->dir_ / "control.sock").string();
      daemon->stub_ = v1::StrataControl::NewStub(
          grpc::CreateChannel(daemon->control_target_, grpc::InsecureChannelCredentials()));
      return daemon;
    }
    int status = 0;
    if (::waitpid(pid, &status, WNOHANG) == pid) {
      daemon->pid_ = -1;
      return absl::UnavailableError(fmt::format("stratad exited during start-up:\n{}", log));
    }
    std::this_thread::sleep_for(milliseconds(20));
  }
  return absl::UnavailableError(fmt::format("stratad did not serve within {} s:\n{}",
                                            options.start_timeout.count(), daemon->Log()));
}

DaemonProcess::~DaemonProcess() {
  Kill();
  std::error_code ec;
  std::filesystem::remove_all(dir_, ec);
}

std::string DaemonProcess::Log() const {
  std::ifstream in(dir_ / "stratad.log");
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

ExitInfo DaemonProcess::Stop(milliseconds timeout) {
  ExitInfo info;
  if (pid_ < 0) return info;
  const auto start = Clock::now();
  ::kill(pid_, SIGTERM);
  int status = 0;
  while (::waitpid(pid_, &status, WNOHANG) == 0) {
    if (Clock::now() - start > timeout) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, &status, 0);
      break;
    }
    std::this_thread::sleep_for(milliseconds(5));
  }
  info.stop_time = std::chrono::duration_cast<milliseconds>(Clock::now() - start);
  info.exited = WIFEXITED(status);
  info.code = info.exited ? WEXITSTATUS(status) : WTERMSIG(status);
  pid_ = -1;
  return info;
}

void DaemonProcess::Kill() {
  if (pid_ < 0) return;
  ::kill(pid_, SIGKILL);
  ::waitpid(pid_, nullptr, 0);
  pid_ = -1;
}

absl::StatusOr<v1::TierStats> DaemonProcess::HostStats() {
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
  v1::StatsResponse stats;
  grpc::Status status = stub_->Stats(&context, v1::StatsRequest(), &stats);
  if (!status.ok()) return absl::UnavailableError(status.error_message());
  for (const v1::TierStats& tier : stats.tiers()) {
    if (tier.tier() == v1::TIER_HOST) return tier;
  }
  return absl::NotFoundError("no host tier in Stats");
}

}  // namespace strata::test_support
