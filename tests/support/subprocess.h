// Subprocess runs a test helper program (e.g. sim_engine) with its stdout captured to a file,
// so tests can read its JSON lines while it runs or after it exits. Not thread-safe.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <optional>
#include <string>
#include <vector>

namespace strata::test_support {

class Subprocess {
 public:
  // Starts argv[0] with argv; stdout goes to a temporary file, stderr to another.
  explicit Subprocess(std::vector<std::string> argv);
  ~Subprocess();
  Subprocess(const Subprocess&) = delete;
  Subprocess& operator=(const Subprocess&) = delete;

  pid_t pid() const { return pid_; }
  // Waits for the exit; nullopt on timeout (the process is then killed). The exit code, or
  // 128 + signal for a process killed by a signal.
  std::optional<int> Wait(std::chrono::milliseconds timeout);
  // The exit code (as Wait's) once it has exited; nullopt while it runs (left running).
  std::optional<int> Poll();
  void Kill(int signal_number);
  std::string Stdout() const;
  std::string Stderr() const;
  // The lines of stdout seen so far.
  std::vector<std::string> StdoutLines() const;

 private:
  pid_t pid_ = -1;
  std::string out_path_;
  std::string err_path_;
};

}  // namespace strata::test_support
