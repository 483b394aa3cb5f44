#include "tests/support/subprocess.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <sstream>
#include <thread>

namespace strata::test_support {
namespace {

std::string TempPath(const char* suffix) {
  char path[] = "/tmp/strata-subprocess-XXXXXX";
  const int fd = ::mkstemp(path);
  if (fd >= 0) ::close(fd);
  return std::string(path) + suffix;
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

}  // namespace

Subprocess::Subprocess(std::vector<std::string> argv)
    : out_path_(TempPath(".out")), err_path_(TempPath(".err")) {
  pid_ = ::fork();
  if (pid_ == 0) {
    const int out = ::open(out_path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    const int err = ::open(err_path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (out < 0 || err < 0 || ::dup2(out, 1) < 0 || ::dup2(err, 2) < 0) _exit(126);
    std::vector<char*> args;
    for (std::string& a : argv) args.push_back(a.data());
    args.push_back(nullptr);
    ::execv(args[0], args.data());
    _exit(127);
  }
}

Subprocess::~Subprocess() {
  if (pid_ > 0) {
    ::kill(pid_, SIGKILL);
    ::waitpid(pid_, nullptr, 0);
  }
  ::unlink(out_path_.c_str());
  ::unlink(err_path_.c_str());
}

std::optional<int> Subprocess::Wait(std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (pid_ > 0) {
    if (std::optional<int> code = Poll()) return code;
    if (std::chrono::steady_clock::now() > deadline) {
      Kill(SIGKILL);
      return std::nullopt;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return std::nullopt;
}

std::optional<int> Subprocess::Poll() {
  int status = 0;
  if (pid_ <= 0 || ::waitpid(pid_, &status, WNOHANG) != pid_) return std::nullopt;
  pid_ = -1;
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

void Subprocess::Kill(int signal_number) {
  if (pid_ <= 0) return;
  ::kill(pid_, signal_number);
  if (signal_number == SIGKILL) {
    ::waitpid(pid_, nullptr, 0);
    pid_ = -1;
  }
}

std::string Subprocess::Stdout() const { return ReadFile(out_path_); }
std::string Subprocess::Stderr() const { return ReadFile(err_path_); }

std::vector<std::string> Subprocess::StdoutLines() const {
  std::vector<std::string> lines;
  std::istringstream in(Stdout());
  for (std::string line; std::getline(in, line);) {
    if (!line.empty()) lines.push_back(line);
  }
  return lines;
}

}  // namespace strata::test_support
