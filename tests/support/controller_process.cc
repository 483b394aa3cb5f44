#include "tests/support/controller_process.h"

#include <signal.h>
#include <stdlib.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <regex>
#include <thread>

#include "fmt/format.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/security/credentials.h"

namespace strata::test_support {

absl::StatusOr<std::unique_ptr<ControllerProcess>> ControllerProcess::Start(
    ControllerProcessOptions options) {
  std::unique_ptr<ControllerProcess> controller(new ControllerProcess());
  char path[] = "/tmp/strata-controller-XXXXXX.toml";
  const int fd = ::mkstemps(path, 5);
  if (fd < 0) return absl::InternalError("mkstemps failed");
  ::close(fd);
  controller->config_path_ = path;
  {
    std::ofstream config(controller->config_path_);
    config << fmt::format(
        "[controller]\nlisten_address = \"{}\"\ninstance_timeout_ms = {}\nauth_token_file = "
        "\"{}\"\n[log]\nlevel = \"debug\"\n",
        options.listen_address, options.instance_timeout_ms, options.auth_token_file);
    config << options.extra_toml;
  }
  controller->process_ = std::make_unique<Subprocess>(
      std::vector<std::string>{STRATA_CONTROLLER_PATH, "--config", controller->config_path_});

  // The controller logs "serving the cluster API on port PORT" once it serves.
  const std::regex serving(R"(serving the cluster API on port (\d+))");
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (std::chrono::steady_clock::now() < deadline) {
    std::smatch match;
    const std::string log = controller->Log();
    if (std::regex_search(log, match, serving)) {
      controller->address_ = "127.0.0.1:" + match[1].str();
      controller->stub_ = v1::StrataCluster::NewStub(
          grpc::CreateChannel(controller->address_, grpc::InsecureChannelCredentials()));
      return controller;
    }
    if (controller->process_->Poll().has_value()) {
      return absl::UnavailableError(
          fmt::format("strata-controller exited during start-up:\n{}", log));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return absl::UnavailableError(
      fmt::format("strata-controller did not serve within 10 s:\n{}", controller->Log()));
}

ControllerProcess::~ControllerProcess() {
  Kill();
  std::error_code ec;
  std::filesystem::remove(config_path_, ec);
}

int ControllerProcess::Stop() {
  process_->Kill(SIGTERM);
  return process_->Wait(std::chrono::seconds(10)).value_or(-1);
}

void ControllerProcess::Kill() {
  if (process_ != nullptr) process_->Kill(SIGKILL);
}

}  // namespace strata::test_support
