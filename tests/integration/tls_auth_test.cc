// stratad with TLS and a bearer token on its gRPC TCP port, driven by the `strata` CLI: a
// self-signed certificate is made with the openssl CLI for each run.
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <regex>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/support/daemon_process.h"
#include "tests/support/subprocess.h"

namespace strata {
namespace {

using test_support::DaemonProcess;
using test_support::Subprocess;
using ::testing::HasSubstr;

constexpr char kOpenssl[] = "/usr/bin/openssl";

struct CliResult {
  int code = -1;
  std::string out;
  std::string err;
};

CliResult Cli(std::vector<std::string> args) {
  args.insert(args.begin(), STRATA_CLI_PATH);
  Subprocess process(args);
  std::optional<int> code = process.Wait(std::chrono::seconds(20));
  return {code.value_or(-1), process.Stdout(), process.Stderr()};
}

TEST(TlsAndToken, TcpNeedsTlsAndTheTokenTheUnixSocketDoesNot) {
  if (!std::filesystem::exists(kOpenssl)) GTEST_SKIP() << kOpenssl << " is missing";
  char tmpl[] = "/tmp/strata-tls-XXXXXX";
  ASSERT_NE(::mkdtemp(tmpl), nullptr);
  const std::filesystem::path dir = tmpl;
  const std::string cert = (dir / "cert.pem").string(), key = (dir / "key.pem").string();
  const std::string make_cert = std::string(kOpenssl) +
                                " req -x509 -newkey rsa:2048 -nodes -days 1 -subj /CN=localhost"
                                " -addext subjectAltName=IP:127.0.0.1,DNS:localhost -keyout " +
                                key + " -out " + cert + " > " + (dir / "openssl.log").string() +
                                " 2>&1";
  ASSERT_EQ(std::system(make_cert.c_str()), 0) << "openssl failed";
  const std::string token_file = (dir / "token").string();
  std::ofstream(token_file) << "tok-123\n";
  const std::string wrong_token_file = (dir / "wrong-token").string();
  std::ofstream(wrong_token_file) << "tok-124\n";

  absl::StatusOr<std::unique_ptr<DaemonProcess>> daemon = DaemonProcess::Start(
      {.extra_args = {"--tls-cert", cert, "--tls-key", key, "--auth-token-file", token_file}});
  ASSERT_TRUE(daemon.ok()) << daemon.status();
  std::smatch match;
  const std::string log = (*daemon)->Log();
  ASSERT_TRUE(std::regex_search(log, match, std::regex(R"(control on 127\.0\.0\.1:(\d+))")));
  const std::string tcp = "127.0.0.1:" + match[1].str();
  const std::string unix_addr = "unix://" + ((*daemon)->dir() / "control.sock").string();

  CliResult ok = Cli({"--addr", tcp, "--tls-ca", cert, "--token-file", token_file, "status"});
  EXPECT_EQ(ok.code, 0) << ok.err;
  EXPECT_THAT(ok.out, HasSubstr("status   serving"));

  CliResult no_token = Cli({"--addr", tcp, "--tls-ca", cert, "status"});
  EXPECT_EQ(no_token.code, 1);
  EXPECT_THAT(no_token.err, HasSubstr("UNAUTHENTICATED"));
  CliResult wrong_token =
      Cli({"--addr", tcp, "--tls-ca", cert, "--token-file", wrong_token_file, "stats"});
  EXPECT_EQ(wrong_token.code, 1);
  EXPECT_THAT(wrong_token.err, HasSubstr("UNAUTHENTICATED"));
  CliResult plaintext =
      Cli({"--addr", tcp, "--timeout-ms", "2000", "--token-file", token_file, "status"});
  EXPECT_EQ(plaintext.code, 1) << "a plaintext client cannot talk to the TLS port";
  EXPECT_THAT(plaintext.err, HasSubstr("UNAVAILABLE"));

  CliResult local = Cli({"--addr", unix_addr, "status"});
  EXPECT_EQ(local.code, 0) << local.err;
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace strata
