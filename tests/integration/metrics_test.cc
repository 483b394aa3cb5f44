// stratad's Prometheus endpoint: scraped over HTTP after real engine traffic; the text is checked
// for the strata_* series and by `promtool check metrics`.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <numeric>
#include <regex>
#include <string>
#include <thread>

#include "core/key_hasher.h"
#include "fmt/format.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "proto/convert.h"
#include "tests/support/daemon_process.h"
#include "tests/support/raw_engine_client.h"
#include "tests/support/test_layout.h"

namespace strata {
namespace {

using test_support::DaemonProcess;
using test_support::RawEngineClient;
using ::testing::HasSubstr;

constexpr char kPromtool[] = "/usr/bin/promtool";

// 64 KiB per chunk.
KvLayout MetricsLayout() {
  return test_support::SmallLayout(
      {.model_id = "metrics-model", .head_dim = 64, .chunk_tokens = 64});
}

// GET /metrics on 127.0.0.1:port; the body, or "" on failure.
std::string Scrape(int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  std::string response;
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0) {
    const std::string request = "GET /metrics HTTP/1.0\r\nHost: localhost\r\n\r\n";
    if (::write(fd, request.data(), request.size()) == static_cast<ssize_t>(request.size())) {
      char buffer[8192];
      ssize_t n;
      while ((n = ::read(fd, buffer, sizeof(buffer))) > 0) response.append(buffer, n);
    }
  }
  ::close(fd);
  const size_t body = response.find("\r\n\r\n");
  return body == std::string::npos ? std::string() : response.substr(body + 4);
}

class MetricsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    // With a device pool in host memory: 1 MiB per layout, 64 pages of 16 tokens of
    // MetricsLayout() (2 layers x 8 KiB each).
    absl::StatusOr<std::unique_ptr<DaemonProcess>> daemon = DaemonProcess::Start(
        {.extra_args = {"--metrics-listen", "127.0.0.1:0"},
         .extra_toml = "[device_pool]\nbytes_per_layout = \"1MiB\"\nbackend = \"host\"\n"});
    ASSERT_TRUE(daemon.ok()) << daemon.status();
    daemon_ = *std::move(daemon);
    std::smatch match;
    const std::string log = daemon_->Log();
    ASSERT_TRUE(std::regex_search(log, match, std::regex(R"(metrics on 127\.0\.0\.1:(\d+))")))
        << log;
    port_ = std::stoi(match[1].str());

    // Traffic: three stores, a load of two chunks (leases kept), an engine's lookup of them as
    // tenant "team-a" (the last chunk half full) and a control Lookup.
    engine_ = std::make_unique<RawEngineClient>(daemon_->engine_socket());
    RawEngineClient& engine = *engine_;
    absl::StatusOr<v1::EngineResponse> hello = engine.Handshake(MetricsLayout());
    ASSERT_TRUE(hello.ok() && hello->status().code() == 0);
    grant_ = hello->handshake().device_pool();
    std::vector<uint32_t> tokens(3 * 64);
    std::iota(tokens.begin(), tokens.end(), 0);
    const std::vector<ChunkKey> keys =
        KeyHasher::Create(MetricsLayout(), {})->PrefixKeys(tokens, {});
    ASSERT_TRUE(engine.Store(keys, 64, 1).ok());
    v1::EngineRequest load = test_support::PrepareLoadRequest(std::span(keys).first(2));
    absl::StatusOr<v1::EngineResponse> loaded = engine.Call(load);
    ASSERT_TRUE(loaded.ok() && loaded->status().code() == 0);
    v1::EngineRequest engine_lookup = test_support::LookupRequest(keys);
    engine_lookup.mutable_lookup()->set_tenant("team-a");
    engine_lookup.mutable_lookup()->set_tokens(2 * 64 + 32);
    absl::StatusOr<v1::EngineResponse> found = engine.Call(engine_lookup);
    ASSERT_TRUE(found.ok() && found->lookup().hit_chunks() == 3);
    grpc::ClientContext context;
    v1::LookupRequest lookup;
    for (const ChunkKey& key : keys) *lookup.add_keys() = ToProto(key);
    v1::LookupResponse looked_up;
    ASSERT_TRUE(daemon_->control().Lookup(&context, lookup, &looked_up).ok());
    text_ = Scrape(port_);
  }

  std::unique_ptr<DaemonProcess> daemon_;
  std::unique_ptr<RawEngineClient> engine_;  // connected during the scrape
  int port_ = 0;
  std::string text_;
  v1::DevicePoolGrant grant_;
};

TEST_F(MetricsTest, ExposesTheStrataSeries) {
  EXPECT_THAT(text_, HasSubstr("strata_stores_total{tier=\"host\"} 3\n"));
  EXPECT_THAT(text_, HasSubstr("strata_store_bytes_total{tier=\"host\"} 196608\n"));
  EXPECT_THAT(text_, HasSubstr("strata_loads_total{tier=\"host\"} 2\n"));
  EXPECT_THAT(text_, HasSubstr("strata_load_bytes_total{tier=\"host\"} 131072\n"));
  EXPECT_THAT(text_, HasSubstr("strata_tier_chunks{tier=\"host\"} 3\n"));
  EXPECT_THAT(text_, HasSubstr("strata_tier_leases{tier=\"host\"} 2\n"));
  EXPECT_THAT(text_, HasSubstr("strata_sessions 1\n"));
  // The engine's lookup and the control API's, apart; the control Lookup named keys (no tokens).
  EXPECT_THAT(text_, HasSubstr("strata_lookups_total{source=\"engine\",tenant=\"team-a\"} 1\n"));
  EXPECT_THAT(text_, HasSubstr("strata_lookups_total{source=\"control\",tenant=\"\"} 1\n"));
  EXPECT_THAT(text_, HasSubstr("strata_lookup_hit_tokens_total{source=\"engine\",tenant=\"team-a\","
                               "tier=\"host\"} 160\n"));
  EXPECT_THAT(text_, HasSubstr("strata_lookup_miss_tokens_total{source=\"engine\",tenant=\"team-"
                               "a\"} 0\n"));
  EXPECT_THAT(text_,
              HasSubstr("strata_tier_evictions_total{reason=\"capacity\",tier=\"host\"} 0\n"));
  EXPECT_THAT(text_, HasSubstr("strata_engine_request_duration_seconds_count{op=\"store\"} 1\n"));
  EXPECT_THAT(text_, HasSubstr("strata_engine_request_duration_seconds_count{op=\"load\"} 1\n"));
  EXPECT_THAT(text_, HasSubstr("strata_lookup_duration_seconds_count 1\n"));
  EXPECT_THAT(text_, HasSubstr("# TYPE strata_checksum_failures_total counter\n"));
  EXPECT_THAT(text_, HasSubstr("# TYPE strata_io_errors_total counter\n"));
}

// The engine's layout was granted its device pool at the handshake, and the pool's series are
// there (every page free: nothing uses the pool yet).
TEST_F(MetricsTest, ExposesTheDevicePoolSeries) {
  EXPECT_EQ(grant_.backend(), "host");
  EXPECT_EQ(grant_.num_pages(), 64u);
  EXPECT_EQ(grant_.page_bytes(), 8192u);
  EXPECT_GE(engine_->device_pool_fd(), 0);
  EXPECT_THAT(text_, ::testing::ContainsRegex(
                         R"(strata_device_pool_capacity_pages\{[^}]*page_bytes="8192"[^}]*\} 64)"));
  EXPECT_THAT(text_,
              ::testing::ContainsRegex(R"(strata_device_pool_pages\{[^}]*state="free"[^}]*\} 64)"));
  EXPECT_THAT(text_, ::testing::ContainsRegex(
                         R"(strata_device_pool_pages\{[^}]*state="referenced"[^}]*\} 0)"));
  EXPECT_THAT(text_,
              ::testing::ContainsRegex(
                  R"(strata_device_pool_events_total\{[^}]*event="admission_reject"[^}]*\} 0)"));
  EXPECT_THAT(text_, ::testing::ContainsRegex(R"(model="metrics-model")"));
  EXPECT_THAT(text_, ::testing::ContainsRegex(
                         R"(strata_device_pool_tiering_total\{[^}]*event="demoted"[^}]*\} 0)"));
  EXPECT_THAT(text_,
              ::testing::ContainsRegex(
                  R"(strata_device_pool_tiering_bytes_total\{[^}]*direction="promoted"[^}]*\} 0)"));
}

// A daemon over a disk tier: demotions, prefetched promotions and the disk tier's own series.
TEST(DiskMetricsTest, ExposesTheDiskTierSeries) {
  const std::filesystem::path disk_dir = std::filesystem::path(::testing::TempDir()) /
                                         ("strata-metrics-disk-" + std::to_string(getpid()));
  std::filesystem::remove_all(disk_dir);
  absl::StatusOr<std::unique_ptr<DaemonProcess>> daemon = DaemonProcess::Start(
      {.host_capacity = "256KiB",  // four 64 KiB chunks
       .extra_args = {"--metrics-listen", "127.0.0.1:0"},
       .extra_toml = fmt::format(
           "[disk]\ndirectory = \"{}\"\ncapacity_bytes = \"16MiB\"\nsegment_bytes = \"1MiB\"\n",
           disk_dir.string())});
  ASSERT_TRUE(daemon.ok()) << daemon.status();
  std::smatch match;
  const std::string log = (*daemon)->Log();
  ASSERT_TRUE(std::regex_search(log, match, std::regex(R"(metrics on 127\.0\.0\.1:(\d+))"))) << log;
  const int port = std::stoi(match[1].str());

  RawEngineClient engine((*daemon)->engine_socket());
  ASSERT_TRUE(engine.Handshake(MetricsLayout()).ok());
  std::vector<uint32_t> tokens(6 * 64);
  std::iota(tokens.begin(), tokens.end(), 0);
  const std::vector<ChunkKey> keys = KeyHasher::Create(MetricsLayout(), {})->PrefixKeys(tokens, {});
  for (const ChunkKey& key : keys) ASSERT_TRUE(engine.Store({key}, 64, 1).ok());
  // Two chunks went to disk; the prefetch brings them back, evicting two more.
  absl::StatusOr<v1::EngineResponse> prefetched =
      engine.Call(test_support::PrefetchRequest(std::span(keys).first(2)));
  ASSERT_TRUE(prefetched.ok() && prefetched->status().code() == 0);
  EXPECT_EQ(prefetched->prefetch().queued_chunks(), 2u);

  std::string text;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  do {
    text = Scrape(port);
    if (text.find("strata_prefetch_chunks_total{outcome=\"promoted\"} 2\n") != std::string::npos &&
        text.find("strata_demotions_total{result=\"written\"} 4\n") != std::string::npos) {
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  } while (std::chrono::steady_clock::now() < deadline);
  EXPECT_THAT(text, HasSubstr("strata_prefetch_chunks_total{outcome=\"promoted\"} 2\n"));
  EXPECT_THAT(text, HasSubstr("strata_demotions_total{result=\"written\"} 4\n"));
  EXPECT_THAT(text, HasSubstr("strata_demotions_total{result=\"failed\"} 0\n"));
  EXPECT_THAT(text, HasSubstr("strata_tier_capacity_bytes{tier=\"disk\"} 16777216\n"));
  EXPECT_THAT(text, HasSubstr("strata_tier_capacity_bytes{tier=\"host\"} 262144\n"));
  // The promoted chunks came from disk, or from the mover's staging buffers (no read) when their
  // writes had not finished yet.
  EXPECT_THAT(text, HasSubstr("\nstrata_disk_reads_total "));
  EXPECT_THAT(text, HasSubstr("\nstrata_disk_writes_total "));
  EXPECT_THAT(text, HasSubstr("strata_io_errors_total{tier=\"disk\"} 0\n"));
  EXPECT_THAT(text, HasSubstr("strata_checksum_failures_total{tier=\"disk\"} 0\n"));
  EXPECT_THAT(text, HasSubstr("strata_tier_chunks{tier=\"disk\"} "));
  EXPECT_THAT(text, HasSubstr("strata_tier_stored_bytes{tier=\"disk\"} "));
  EXPECT_THAT(text, HasSubstr("strata_tier_encoded_chunks{tier=\"disk\"} 0\n"));
  EXPECT_EQ((*daemon)->Stop().code, 0);
  std::filesystem::remove_all(disk_dir);
}

TEST_F(MetricsTest, PassesPromtoolCheckMetrics) {
  if (!std::filesystem::exists(kPromtool)) {
    GTEST_SKIP() << kPromtool << " is missing (Debian package prometheus)";
  }
  ASSERT_FALSE(text_.empty());
  const std::filesystem::path path = daemon_->dir() / "metrics.txt";
  std::ofstream(path) << text_;
  const std::string command = std::string(kPromtool) + " check metrics < " + path.string() + " > " +
                              (daemon_->dir() / "promtool.out").string() + " 2>&1";
  const int status = std::system(command.c_str());
  std::ifstream out(daemon_->dir() / "promtool.out");
  const std::string report((std::istreambuf_iterator<char>(out)), {});
  EXPECT_EQ(status, 0) << report;
}

// deploy/grafana/strata-node.json must query only series the daemon exports.
TEST_F(MetricsTest, TheGrafanaDashboardUsesExportedNames) {
  std::ifstream file(std::string(STRATA_SOURCE_DIR) + "/deploy/grafana/strata-node.json");
  ASSERT_TRUE(file) << "dashboard missing";
  const std::string dashboard((std::istreambuf_iterator<char>(file)), {});
  const std::regex name(R"(strata_[a-z_]+)");
  int names = 0;
  for (auto it = std::sregex_iterator(dashboard.begin(), dashboard.end(), name);
       it != std::sregex_iterator(); ++it) {
    EXPECT_THAT(text_, HasSubstr(fmt::format("\n{}", it->str())))
        << it->str() << " is not exported";
    ++names;
  }
  EXPECT_GT(names, 15);
}

// civetweb 1.15 notices a stop only when its listener's 2 s poll ends; the exposer wakes it, so
// stopping a daemon with metrics on takes about as long as without (it took ~1.7 s).
TEST_F(MetricsTest, StopsWithinASecond) {
  const test_support::ExitInfo exit = daemon_->Stop();
  EXPECT_TRUE(exit.exited);
  EXPECT_EQ(exit.code, 0);
  EXPECT_LT(exit.stop_time, std::chrono::milliseconds(1000));
}

}  // namespace
}  // namespace strata
