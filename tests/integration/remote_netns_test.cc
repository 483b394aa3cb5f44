// Two stratad processes in two network namespaces that this test makes, joined by a veth pair:
// the only way between them is the veth, so a chunk stored through A and loaded byte-exact
// through B has crossed it, and the veth's byte counters show it. Needs root (or CAP_NET_ADMIN)
// and `ip`; skips with the reason where the sandbox refuses to make the namespaces.
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <numeric>
#include <regex>
#include <thread>

#include "core/key_hasher.h"
#include "fmt/format.h"
#include "gtest/gtest.h"
#include "tests/support/daemon_process.h"
#include "tests/support/raw_engine_client.h"
#include "tests/support/subprocess.h"
#include "tests/support/test_layout.h"

namespace strata {
namespace {

using std::chrono::milliseconds;
using test_support::DaemonProcess;
using test_support::RawEngineClient;
using test_support::Subprocess;

constexpr const char* kIp = "/usr/sbin/ip";

KvLayout Layout() {
  return test_support::SmallLayout(
      {.model_id = "netns-itest", .num_layers = 4, .head_dim = 64, .chunk_tokens = 64});
}

// Runs `ip` with `args`; its exit code and what it printed.
struct IpResult {
  int code = -1;
  std::string out;
};
IpResult Ip(std::vector<std::string> args) {
  args.insert(args.begin(), kIp);
  Subprocess ip(std::move(args));
  const std::optional<int> code = ip.Wait(std::chrono::seconds(10));
  return {code.value_or(-1), ip.Stdout() + ip.Stderr()};
}

// Two namespaces joined by a veth pair, with addresses, torn down on destruction.
class VethPair {
 public:
  VethPair() {
    const int id = ::getpid() % 100000;
    ns_a_ = fmt::format("strata-a-{}", id);
    ns_b_ = fmt::format("strata-b-{}", id);
    dev_a_ = fmt::format("sva{}", id);
    dev_b_ = fmt::format("svb{}", id);
    const int subnet = id % 250;
    address_a_ = fmt::format("10.213.{}.1", subnet);
    address_b_ = fmt::format("10.213.{}.2", subnet);
  }
  ~VethPair() {
    Ip({"netns", "del", ns_a_});
    Ip({"netns", "del", ns_b_});  // the veth goes with its namespaces
  }

  // The first command's refusal (the sandbox's reason), or empty once everything is set up.
  std::string SetUp() {
    const std::vector<std::vector<std::string>> steps = {
        {"netns", "add", ns_a_},
        {"netns", "add", ns_b_},
        {"link", "add", dev_a_, "type", "veth", "peer", "name", dev_b_},
        {"link", "set", dev_a_, "netns", ns_a_},
        {"link", "set", dev_b_, "netns", ns_b_},
        {"-n", ns_a_, "addr", "add", address_a_ + "/24", "dev", dev_a_},
        {"-n", ns_b_, "addr", "add", address_b_ + "/24", "dev", dev_b_},
        {"-n", ns_a_, "link", "set", dev_a_, "up"},
        {"-n", ns_b_, "link", "set", dev_b_, "up"},
        {"-n", ns_a_, "link", "set", "lo", "up"},
        {"-n", ns_b_, "link", "set", "lo", "up"},
    };
    for (const std::vector<std::string>& step : steps) {
      const IpResult result = Ip(step);
      if (result.code != 0) {
        return fmt::format("ip {}: exit {}: {}", fmt::join(step, " "), result.code, result.out);
      }
    }
    // UCX lists only devices that carry traffic: wait for both ends' carrier.
    for (int attempt = 0; attempt < 250; ++attempt) {
      if (Ip({"-n", ns_a_, "link", "show", "dev", dev_a_}).out.find("state UP") !=
              std::string::npos &&
          Ip({"-n", ns_b_, "link", "show", "dev", dev_b_}).out.find("state UP") !=
              std::string::npos) {
        return "";
      }
      std::this_thread::sleep_for(milliseconds(20));
    }
    return "the veth pair never came up";
  }

  // Bytes the veth end in A has sent and received.
  std::pair<uint64_t, uint64_t> TrafficOfA() const {
    const IpResult shown = Ip({"-n", ns_a_, "-s", "link", "show", "dev", dev_a_});
    // "RX:  bytes packets ..." then the numbers; the same for TX.
    const std::regex counters(R"((RX|TX):[^\n]*\n\s*(\d+))");
    uint64_t rx = 0;
    uint64_t tx = 0;
    for (std::sregex_iterator it(shown.out.begin(), shown.out.end(), counters), end; it != end;
         ++it) {
      const uint64_t bytes = std::stoull((*it)[2].str());
      ((*it)[1].str() == "RX" ? rx : tx) = bytes;
    }
    return {rx, tx};
  }

  std::string ns_a_, ns_b_, dev_a_, dev_b_, address_a_, address_b_;
};

// A daemon in `ns` with the remote tier listening on `address`:7400 over `device`.
absl::StatusOr<std::unique_ptr<DaemonProcess>> StartIn(const std::string& ns,
                                                       const std::string& address,
                                                       const std::string& device,
                                                       const std::string& token_file,
                                                       const std::string& peer) {
  return DaemonProcess::Start(
      {.host_capacity = "16MiB",
       .extra_toml = fmt::format(
           "[remote]\nlisten_address = \"{}:7400\"\ncluster_token_file = \"{}\"\n"
           "transports = \"tcp\"\nnet_devices = \"{}\"\npeers = [{}]\n",
           address, token_file, device, peer.empty() ? "" : fmt::format("\"{}:7400\"", peer)),
       .network_namespace = ns});
}

TEST(RemoteNetns, AChunkCrossesTheVethFromOneNamespacesDaemonToTheOther) {
  if (::geteuid() != 0) GTEST_SKIP() << "network namespaces need root (CAP_NET_ADMIN)";
  if (!std::filesystem::exists(kIp)) GTEST_SKIP() << kIp << " is not installed (iproute2)";
  VethPair veth;
  if (const std::string refused = veth.SetUp(); !refused.empty()) {
    GTEST_SKIP() << "the sandbox refuses network namespaces: " << refused;
  }
  const std::string token_file = std::filesystem::path(::testing::TempDir()) /
                                 fmt::format("strata-netns-token-{}", ::getpid());
  std::ofstream(token_file) << "netns-secret\n";

  auto a = StartIn(veth.ns_a_, veth.address_a_, veth.dev_a_, token_file, "");
  ASSERT_TRUE(a.ok()) << a.status();
  auto b = StartIn(veth.ns_b_, veth.address_b_, veth.dev_b_, token_file, veth.address_a_);
  ASSERT_TRUE(b.ok()) << b.status();

  std::vector<uint32_t> tokens(8 * 64);
  std::iota(tokens.begin(), tokens.end(), 0);
  const std::vector<ChunkKey> keys = KeyHasher::Create(Layout(), {})->PrefixKeys(tokens, {});
  // Engines reach the daemons by their Unix sockets, which no network namespace hides.
  RawEngineClient engine_a((*a)->engine_socket());
  ASSERT_TRUE(engine_a.Handshake(Layout()).ok());
  ASSERT_TRUE(engine_a.Store(keys, 64, 20).ok());
  const auto [rx_before, tx_before] = veth.TrafficOfA();

  RawEngineClient engine_b((*b)->engine_socket());
  ASSERT_TRUE(engine_b.Handshake(Layout()).ok());
  uint32_t hits = 0;
  for (int attempt = 0; attempt < 200 && hits < keys.size(); ++attempt) {
    absl::StatusOr<v1::EngineResponse> found = engine_b.Call(test_support::LookupRequest(keys));
    hits = found.ok() ? found->lookup().hit_chunks() : 0;
    if (hits < keys.size()) std::this_thread::sleep_for(milliseconds(25));
  }
  ASSERT_EQ(hits, keys.size()) << (*b)->Log();
  absl::StatusOr<v1::EngineResponse> leased = engine_b.Call(test_support::PrepareLoadRequest(keys));
  ASSERT_TRUE(leased.ok()) << leased.status();
  for (uint32_t i = 0; i < keys.size(); ++i) {
    const v1::LoadPlacement& chunk = leased->prepare_load().chunks(static_cast<int>(i));
    ASSERT_EQ(chunk.status().code(), 0) << i << ": " << chunk.status().message();
    for (const v1::Extent& extent : chunk.extents()) {
      for (uint64_t offset = 0; offset < extent.length(); offset += 4096) {
        ASSERT_EQ(static_cast<uint8_t>(engine_b.arena()[extent.offset() + offset]), 20 + i);
      }
    }
  }
  // The chunks' bytes left A through its veth end.
  const uint64_t payload = keys.size() * Layout().chunk_bytes(64);
  const auto [rx_after, tx_after] = veth.TrafficOfA();
  EXPECT_GE(tx_after - tx_before, payload)
      << "A's veth sent " << tx_after - tx_before << " bytes for " << payload << " bytes of chunks";
  EXPECT_GT(rx_after, rx_before);
  EXPECT_EQ((*b)->Stop().code, 0);
  EXPECT_EQ((*a)->Stop().code, 0);
  std::filesystem::remove(token_file);
}

}  // namespace
}  // namespace strata
