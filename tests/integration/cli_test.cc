// The `strata` CLI against a real stratad: each command's output (golden text) and exit code.
#include <unistd.h>

#include <filesystem>
#include <numeric>
#include <string>
#include <vector>

#include "core/key_hasher.h"
#include "fmt/format.h"
#include "fmt/ranges.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/support/daemon_process.h"
#include "tests/support/raw_engine_client.h"
#include "tests/support/subprocess.h"
#include "tests/support/test_layout.h"

namespace strata {
namespace {

using test_support::DaemonProcess;
using test_support::RawEngineClient;
using test_support::Subprocess;
using ::testing::HasSubstr;

// 64 KiB per chunk.
KvLayout CliLayout() {
  return test_support::SmallLayout({.model_id = "cli-model", .head_dim = 64, .chunk_tokens = 64});
}

// The same layout as `strata` flags.
const std::vector<std::string> kLayoutFlags = {"--model",    "cli-model", "--layers",       "2",
                                               "--kv-heads", "2",         "--head-dim",     "64",
                                               "--dtype",    "fp16",      "--chunk-tokens", "64"};

std::vector<uint32_t> Tokens(size_t n) {
  std::vector<uint32_t> tokens(n);
  std::iota(tokens.begin(), tokens.end(), 0);
  return tokens;
}

std::string TokenList(size_t n) { return fmt::format("{}", fmt::join(Tokens(n), ",")); }

struct CliResult {
  int code = -1;
  std::string out;
  std::string err;
};

class CliTest : public ::testing::Test {
 protected:
  // The daemon's options: the defaults (no disk tier) unless a suite says otherwise.
  virtual test_support::DaemonProcessOptions Options() { return {}; }

  void SetUp() override {
    absl::StatusOr<std::unique_ptr<DaemonProcess>> daemon = DaemonProcess::Start(Options());
    ASSERT_TRUE(daemon.ok()) << daemon.status();
    daemon_ = *std::move(daemon);
    addr_ = "unix://" + (daemon_->dir() / "control.sock").string();
    engine_ = std::make_unique<RawEngineClient>(daemon_->engine_socket());
    ASSERT_TRUE(engine_->Handshake(CliLayout()).ok());
    keys_ = KeyHasher::Create(CliLayout(), {})->PrefixKeys(Tokens(3 * 64), {});
  }

  CliResult Cli(std::vector<std::string> args, bool with_layout = false) {
    std::vector<std::string> argv = {STRATA_CLI_PATH, "--addr", addr_};
    argv.insert(argv.end(), args.begin(), args.end());
    if (with_layout) argv.insert(argv.end(), kLayoutFlags.begin(), kLayoutFlags.end());
    Subprocess process(argv);
    std::optional<int> code = process.Wait(std::chrono::seconds(20));
    return {code.value_or(-1), process.Stdout(), process.Stderr()};
  }

  std::unique_ptr<DaemonProcess> daemon_;
  std::unique_ptr<RawEngineClient> engine_;
  std::string addr_;
  std::vector<ChunkKey> keys_;
};

TEST_F(CliTest, LsAndClearByTenantGolden) {
  const std::vector<ChunkKey> acme =
      KeyHasher::Create(CliLayout(), {})->PrefixKeys(Tokens(2 * 64), {.tenant_salt = "acme"});
  ASSERT_TRUE(engine_->Store(acme, 64, 1, true, "acme").ok());
  ASSERT_TRUE(engine_->Store({keys_[0]}, 64, 3).ok());

  CliResult ls = Cli({"ls", "--tenant", "acme"});
  EXPECT_EQ(ls.code, 0) << ls.err;
  EXPECT_EQ(ls.out,
            fmt::format("tier   tokens       size     stored codec    pin    soft-ttl leases  key\n"
                        "host       64   64.0 KiB   64.0 KiB -        -             -      0  {}\n"
                        "host       64   64.0 KiB   64.0 KiB -        -             -      0  {}\n"
                        "2 chunks\n",
                        acme[0].ToString(), acme[1].ToString()));
  CliResult clear = Cli({"clear", "--tenant", "acme"});
  EXPECT_EQ(clear.code, 0) << clear.err;
  EXPECT_EQ(clear.out, "removed 2 chunks (128.0 KiB)\n");
  CliResult unknown = Cli({"clear", "--tenant", "nobody"});
  EXPECT_EQ(unknown.code, 0) << unknown.err;
  EXPECT_EQ(unknown.out, "removed 0 chunks (0 B)\n");
  // The tenant of requests without a salt is "".
  CliResult unsalted = Cli({"ls", "--tenant", ""});
  EXPECT_EQ(unsalted.code, 0) << unsalted.err;
  EXPECT_THAT(unsalted.out, HasSubstr(keys_[0].ToString()));
  EXPECT_THAT(unsalted.out, HasSubstr("1 chunks\n"));
}

TEST_F(CliTest, PinLsMoveClearAndEventsGolden) {
  ASSERT_TRUE(engine_->Store(keys_, 64, 1).ok());

  CliResult pin = Cli({"pin", "--tokens", TokenList(128)}, true);
  EXPECT_EQ(pin.code, 0) << pin.err;
  EXPECT_EQ(pin.out, "pinned 2 chunks (128.0 KiB); 0 not cached\n");

  // The CLI sends a lookup's tokens as fixed32 words; the daemon hashes them to the same chain.
  CliResult lookup = Cli({"lookup", "--tokens", TokenList(3 * 64 + 10)}, true);
  EXPECT_EQ(lookup.code, 0) << lookup.err;
  EXPECT_EQ(lookup.out, fmt::format("matched 192 tokens: 3 of 4 chunks cached\n"
                                    "     0  host    {}\n"
                                    "     1  host    {}\n"
                                    "     2  host    {}\n",
                                    keys_[0].ToString(), keys_[1].ToString(), keys_[2].ToString()));

  CliResult soft = Cli({"pin", "--soft", "--ttl-ms", "600000", "--key", keys_[2].ToString()});
  EXPECT_EQ(soft.code, 0) << soft.err;
  EXPECT_EQ(soft.out, "pinned 1 chunks (64.0 KiB); 0 not cached\n");

  CliResult ls = Cli({"ls", "--page-size", "2"});
  EXPECT_EQ(ls.code, 0) << ls.err;
  EXPECT_EQ(ls.out,
            fmt::format("tier   tokens       size     stored codec    pin    soft-ttl leases  key\n"
                        "host       64   64.0 KiB   64.0 KiB -        hard          -      0  {}\n"
                        "host       64   64.0 KiB   64.0 KiB -        hard          -      0  {}\n"
                        "2 chunks; more with --page-token h2\n",
                        keys_[0].ToString(), keys_[1].ToString()));
  CliResult next = Cli({"ls", "--page-token", "h2"});
  EXPECT_EQ(next.code, 0) << next.err;
  // The soft pin's remaining time runs on the daemon's clock: up to 600000 ms.
  EXPECT_THAT(next.out,
              ::testing::MatchesRegex(fmt::format(
                  "tier   tokens       size     stored codec    pin    soft-ttl leases  key\n"
                  "host       64   64.0 KiB   64.0 KiB -        soft  5[0-9]{{5}} ms      0  {}\n"
                  "1 chunks\n",
                  keys_[2].ToString())));

  CliResult move = Cli({"move", "--to", "host", "--key", keys_[0].ToString()});
  EXPECT_EQ(move.code, 0) << move.err;
  EXPECT_EQ(move.out, "moved 0 chunks to host; 1 already there; 0 not cached\n");
  CliResult to_disk = Cli({"move", "--to", "disk", "--key", keys_[0].ToString()});
  EXPECT_EQ(to_disk.code, 1);
  EXPECT_EQ(to_disk.err, "strata: FAILED_PRECONDITION: disk tier not configured\n");

  CliResult clear = Cli({"clear", "--tokens", TokenList(64)}, true);
  EXPECT_EQ(clear.code, 0) << clear.err;
  EXPECT_EQ(clear.out, "removed 1 chunks (64.0 KiB)\n");
  CliResult all = Cli({"clear", "--all"});
  EXPECT_EQ(all.out, "removed 2 chunks (128.0 KiB)\n");

  CliResult events = Cli({"events", "--from", "1", "--limit", "5"});
  EXPECT_EQ(events.code, 0) << events.err;
  EXPECT_EQ(events.out, fmt::format("       1  host   stored   {}  tokens 64  parent -\n"
                                    "       2  host   stored   {}  tokens 64  parent -\n"
                                    "       3  host   stored   {}  tokens 64  parent -\n"
                                    "       4  host   removed  {}  (removed)\n"
                                    "       5  host   cleared  every chunk\n",
                                    keys_[0].ToString(), keys_[1].ToString(), keys_[2].ToString(),
                                    keys_[0].ToString()));
  CliResult json_event = Cli({"--json", "events", "--from", "5", "--limit", "1"});
  EXPECT_EQ(json_event.out, "{\"sequence\":\"5\",\"tier\":\"TIER_HOST\",\"cleared\":{}}\n");
}

TEST_F(CliTest, DrainStatsAndErrors) {
  ASSERT_TRUE(engine_->Store({keys_[0]}, 64, 1).ok());
  CliResult serving = Cli({"ready"});
  EXPECT_EQ(serving.code, 0) << serving.err;
  CliResult drain = Cli({"drain"});
  EXPECT_EQ(drain.code, 0) << drain.err;
  EXPECT_EQ(drain.out,
            "draining: no new chunks are admitted\nresident 1 chunks (64.0 KiB), 0 open "
            "reservations; flushed 0 chunks\n");
  CliResult status = Cli({"status"});
  EXPECT_THAT(status.out, HasSubstr("status   draining\n"));
  // Alive (status: 0) but not ready (ready: 1): a readiness probe takes the node out of rotation.
  EXPECT_EQ(status.code, 0) << status.err;
  CliResult ready = Cli({"ready"});
  EXPECT_EQ(ready.code, 1) << ready.err;
  EXPECT_THAT(ready.out, HasSubstr("status   draining\n"));
  EXPECT_FALSE(engine_->Store({keys_[1]}, 64, 2).ok()) << "a draining daemon admits nothing";

  CliResult stats = Cli({"stats", "--json"});
  EXPECT_EQ(stats.code, 0) << stats.err;
  EXPECT_THAT(stats.out, HasSubstr("\"tier\":\"TIER_HOST\""));
  EXPECT_THAT(stats.out, HasSubstr("\"chunks\":\"1\""));

  // An engine's lookup is what the node's figures count (a control Lookup would count apart):
  // the stored chunk and one the daemon lacks, as tenant "team-a", 100 tokens in all.
  v1::EngineRequest lookup = test_support::LookupRequest(std::span(keys_).first(2));
  lookup.mutable_lookup()->set_tenant("team-a");
  lookup.mutable_lookup()->set_tokens(100);
  absl::StatusOr<v1::EngineResponse> found = engine_->Call(lookup);
  ASSERT_TRUE(found.ok() && found->lookup().hit_chunks() == 1);
  CliResult text = Cli({"stats"});
  EXPECT_EQ(text.code, 0) << text.err;
  EXPECT_THAT(text.out, HasSubstr("engine lookups 1  hit tokens 64  miss tokens 36  token hit "
                                  "ratio 0.640\n"));
  EXPECT_THAT(text.out, HasSubstr("  hit tokens in host   64\n"));
  EXPECT_THAT(text.out, HasSubstr("  tenant 'team-a' lookups 1  hit tokens 64"));
  EXPECT_THAT(text.out, HasSubstr("control lookups 0  hit tokens 0  miss tokens 0  token hit "
                                  "ratio -\n"));

  CliResult bad_tokens = Cli({"pin", "--tokens", "1,x"}, true);
  EXPECT_EQ(bad_tokens.code, 2);
  EXPECT_THAT(bad_tokens.err, HasSubstr("INVALID_ARGUMENT: malformed token list"));
  CliResult bad_tier = Cli({"ls", "--tier", "tape"});
  EXPECT_EQ(bad_tier.code, 2);
  EXPECT_THAT(bad_tier.err, HasSubstr("tier 'tape' is not one of"));
  CliResult bad_token = Cli({"ls", "--page-token", "nope"});
  EXPECT_EQ(bad_token.code, 2);
  EXPECT_THAT(bad_token.err, HasSubstr("was not produced by this daemon"));
  CliResult compress_less = Cli({"move", "--key", keys_[0].ToString()});
  EXPECT_EQ(compress_less.code, 2) << "--to is required";
  // Layout names go through core's one parser: an alias gives the same keys as the canonical
  // name, an unknown name is a usage error that lists the accepted ones.
  CliResult canonical = Cli({"hash", "--tokens", TokenList(64), "--dtype", "bf16"});
  EXPECT_EQ(canonical.code, 0) << canonical.err;
  CliResult alias = Cli({"hash", "--tokens", TokenList(64), "--dtype", "torch.BFloat16"});
  EXPECT_EQ(alias.code, 0) << alias.err;
  EXPECT_EQ(alias.out, canonical.out);
  CliResult bad_dtype = Cli({"hash", "--tokens", "1", "--dtype", "float64"});
  EXPECT_EQ(bad_dtype.code, 2);
  EXPECT_THAT(bad_dtype.err, HasSubstr("--dtype: unknown dtype 'float64' (accepted"));

  std::vector<std::string> unreachable = {STRATA_CLI_PATH, "--addr", "unix:///nonexistent.sock",
                                          "--timeout-ms",  "500",    "status"};
  Subprocess process(unreachable);
  EXPECT_EQ(process.Wait(std::chrono::seconds(20)), 1);
  EXPECT_THAT(process.Stderr(), HasSubstr("strata: "));
}

class CliDiskTest : public CliTest {
 protected:
  test_support::DaemonProcessOptions Options() override {
    std::filesystem::remove_all(disk_dir_);
    return {
        .extra_toml = fmt::format(
            "[disk]\ndirectory = \"{}\"\ncapacity_bytes = \"16MiB\"\nsegment_bytes = \"1MiB\"\n",
            disk_dir_.string())};
  }
  void TearDown() override {
    daemon_.reset();
    std::filesystem::remove_all(disk_dir_);
  }

  const std::filesystem::path disk_dir_ = std::filesystem::path(::testing::TempDir()) /
                                          ("strata-cli-disk-" + std::to_string(::getpid()));
};

TEST_F(CliDiskTest, CompressLsAndDecompressGolden) {
  ASSERT_TRUE(engine_->Store(keys_, 64, 1).ok());
  for (int i = 0; i < 2; ++i) {
    CliResult move = Cli({"move", "--to", "disk", "--key", keys_[i].ToString()});
    ASSERT_EQ(move.code, 0) << move.err;
  }
  CliResult unknown = Cli({"compress", "--codec", "zip", "--key", keys_[0].ToString()});
  EXPECT_EQ(unknown.code, 2);
  EXPECT_THAT(unknown.err, HasSubstr("INVALID_ARGUMENT: Compress: "));
  // Host chunks are compressed in place too; the daemon decodes them for loads.
  CliResult host =
      Cli({"compress", "--codec", "int8", "--tier", "host", "--key", keys_[2].ToString()});
  EXPECT_EQ(host.code, 0) << host.err;
  EXPECT_THAT(host.out, ::testing::StartsWith("compressed 1 chunks (64.0 KiB -> "));
  CliResult host_ls = Cli({"ls", "--tier", "host"});
  EXPECT_EQ(host_ls.code, 0) << host_ls.err;
  EXPECT_THAT(host_ls.out, HasSubstr("int8"));
  CliResult host_back = Cli({"decompress", "--tier", "host", "--key", keys_[2].ToString()});
  EXPECT_EQ(host_back.code, 0) << host_back.err;
  EXPECT_THAT(host_back.out, ::testing::StartsWith("decompressed 1 chunks ("));
  // Compressed again, it is still an engine's hit: the daemon decodes it back before the load.
  host = Cli({"compress", "--codec", "kivi4", "--tier", "host", "--key", keys_[2].ToString()});
  EXPECT_EQ(host.code, 0) << host.err;
  EXPECT_THAT(host.out, ::testing::StartsWith("compressed 1 chunks (64.0 KiB -> "));
  absl::StatusOr<v1::EngineResponse> loaded =
      engine_->Call(test_support::PrepareLoadRequest({&keys_[2], 1}));
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  ASSERT_EQ(loaded->prepare_load().chunks_size(), 1);
  EXPECT_EQ(loaded->prepare_load().chunks(0).status().code(), 0)
      << loaded->prepare_load().chunks(0).status().message();
  EXPECT_EQ(loaded->prepare_load().chunks(0).size_bytes(), 64u << 10);
  host_ls = Cli({"ls", "--tier", "host"});
  EXPECT_THAT(host_ls.out, ::testing::Not(HasSubstr("kivi4")));

  // The engine's handshake announced the layout to the disk: keys alone are enough.
  CliResult compress = Cli({"compress", "--codec", "int8", "--key", keys_[0].ToString(), "--key",
                            keys_[1].ToString(), "--key", keys_[2].ToString()});
  EXPECT_EQ(compress.code, 0) << compress.err;
  EXPECT_THAT(compress.out,
              ::testing::MatchesRegex("compressed 2 chunks \\(128.0 KiB -> [0-9.]+ KiB\\); 0 "
                                      "compressed already; 1 not in the tier\n"
                                      "largest error: relative [0-9.e-]+, absolute [0-9.e-]+ "
                                      "\\(the codec promises: .+\\)\n"));
  CliResult ls = Cli({"ls", "--tier", "disk"});
  EXPECT_EQ(ls.code, 0) << ls.err;
  EXPECT_THAT(ls.out, HasSubstr("int8"));
  EXPECT_THAT(ls.out, HasSubstr("2 chunks\n"));

  CliResult decompress = Cli({"decompress", "--key", keys_[0].ToString()});
  EXPECT_EQ(decompress.code, 0) << decompress.err;
  EXPECT_THAT(decompress.out,
              ::testing::MatchesRegex("decompressed 1 chunks \\([0-9.]+ KiB -> 64.0 KiB\\); 0 not "
                                      "compressed; 0 not in the tier\n"));
  CliResult again = Cli({"decompress", "--key", keys_[0].ToString()});
  EXPECT_EQ(again.out, "decompressed 0 chunks (0 B -> 0 B); 1 not compressed; 0 not in the tier\n");

  // Every disk chunk of a tenant: this engine's requests carry no tenant salt ("").
  CliResult by_tenant = Cli({"decompress", "--tenant", ""});
  EXPECT_EQ(by_tenant.code, 0) << by_tenant.err;
  EXPECT_THAT(by_tenant.out, ::testing::MatchesRegex("decompressed 1 chunks \\([0-9.]+ KiB -> "
                                                     "64.0 KiB\\); 1 not compressed; 0 not in the "
                                                     "tier\n"));
  CliResult nobody = Cli({"compress", "--codec", "int8", "--tenant", "nobody"});
  EXPECT_EQ(nobody.code, 0) << nobody.err;
  EXPECT_EQ(nobody.out,
            "compressed 0 chunks (0 B -> 0 B); 0 compressed already; 0 not in the tier\n");
}

}  // namespace
}  // namespace strata
