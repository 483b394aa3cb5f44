#include "daemon/config.h"

#include "daemon/cluster_membership.h"
#include "gtest/gtest.h"

namespace strata::daemon {
namespace {

ConfigEnvironment Env(uint64_t ram, std::string runtime_dir = "") {
  return {.physical_memory_bytes = ram, .runtime_dir = std::move(runtime_dir)};
}

TEST(DaemonConfig, DefaultIsQuarterOfRamCappedAt8GiB) {
  const DaemonConfig small = DefaultConfig(Env(uint64_t{16} << 30));
  EXPECT_EQ(small.host.capacity_bytes, uint64_t{4} << 30);
  const DaemonConfig big = DefaultConfig(Env(uint64_t{256} << 30));
  EXPECT_EQ(big.host.capacity_bytes, uint64_t{8} << 30);
  const DaemonConfig odd = DefaultConfig(Env((uint64_t{3} << 30) + 12345));
  EXPECT_EQ(odd.host.capacity_bytes % odd.host.page_bytes, 0u);
  EXPECT_TRUE(ValidateConfig(small).ok());
  EXPECT_EQ(small.control.listen_address, "127.0.0.1:50051");
}

TEST(DaemonConfig, SocketsLiveUnderTheRuntimeDir) {
  EXPECT_EQ(DefaultConfig(Env(1ull << 34, "/run/user/7")).engine.socket_path,
            "/run/user/7/strata/engine.sock");
  EXPECT_EQ(DefaultConfig(Env(1ull << 34)).engine.socket_path, "./var/run/strata/engine.sock");
}

TEST(DaemonConfig, TomlOverridesAndRoundTrips) {
  absl::StatusOr<DaemonConfig> config = ApplyToml(R"(
[host]
capacity_bytes = "1GiB"
page_bytes = 65536
policy = "lru"
verify_every_n_loads = 8
codec = "kivi4"
codec_group_size = 64
codec_threads = 2
[host.tenant_quotas]
team-a = "256MiB"
"team b" = 1048576
[host.tenant_codecs]
team-a = ""
[disk]
directory = "/var/cache/strata"
capacity_bytes = "100GiB"
demotion_queue_bytes = "64MiB"
write_through = true
codec = "cachegen"
codec_group_size = 16
codec_bits = 4
codec_energy = 0.95
codec_threads = 3
[disk.tenant_codecs]
premium = ""
bulk = { codec = "kivi4", group_size = 64 }
lab = "xkv"
[device_pool]
bytes_per_layout = "2GiB"
block_tokens = 32
backend = "host"
allow_host_fallback = true
device = 1
demote_ahead = false
[engine]
socket_path = "/tmp/x.sock"
allowed_uids = [1000, 1001]
[keys]
hash_algorithm = "sha256_cbor"
seed = "42"
[log]
level = "debug"
[control]
event_ring_capacity = 1024
[metrics]
listen_address = "127.0.0.1:9464"
[remote]
listen_address = "0.0.0.0:7400"
peers = ["10.0.0.2:7400", "10.0.0.3:7400"]
cluster_token_file = "/etc/strata/cluster-token"
node_id = "node-1"
lookup_budget_us = 500
read_window_bytes = "8MiB"
transports = "tcp"
[cluster]
controllers = ["10.0.0.9:50070", "10.0.0.10:50070"]
instance_id = "node-1"
advertise_address = "node-1.internal:50051"
token_file = "/etc/strata/controller-token"
tls_ca_path = "/etc/strata/ca.pem"
)",
                                                  DefaultConfig(Env(1ull << 34)));
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->host.capacity_bytes, 1ull << 30);
  EXPECT_EQ(config->host.page_bytes, 65536u);
  EXPECT_EQ(config->host.verify_every_n_loads, 8u);
  EXPECT_EQ(config->host.tenant_quotas,
            (std::map<std::string, uint64_t>{{"team-a", 256ull << 20}, {"team b", 1ull << 20}}));
  EXPECT_EQ(config->engine.allowed_uids, (std::vector<uint32_t>{1000, 1001}));
  EXPECT_EQ(config->host.codec, "kivi4");
  EXPECT_EQ(config->host.codec_group_size, 64u);
  EXPECT_EQ(config->host.codec_bits, 0u);
  EXPECT_EQ(config->host.codec_threads, 2u);
  ASSERT_EQ(config->host.tenant_codecs.size(), 1u);
  EXPECT_EQ(config->host.tenant_codecs.at("team-a").codec, "");
  EXPECT_EQ(config->disk.directory, "/var/cache/strata");
  EXPECT_EQ(config->disk.capacity_bytes, 100ull << 30);
  EXPECT_EQ(config->disk.segment_bytes, 256ull << 20);
  EXPECT_EQ(config->disk.demotion_queue_bytes, 64ull << 20);
  EXPECT_TRUE(config->disk.write_through);
  EXPECT_EQ(config->disk.codec, "cachegen");
  EXPECT_EQ(config->disk.codec_group_size, 16u);
  EXPECT_EQ(config->disk.codec_bits, 4u);
  EXPECT_DOUBLE_EQ(config->disk.codec_energy, 0.95);
  EXPECT_EQ(config->disk.codec_threads, 3u);
  ASSERT_EQ(config->disk.tenant_codecs.size(), 3u);
  EXPECT_EQ(config->disk.tenant_codecs.at("premium").codec, "");
  EXPECT_EQ(config->disk.tenant_codecs.at("bulk").codec, "kivi4");
  EXPECT_EQ(config->disk.tenant_codecs.at("bulk").group_size, 64u);
  EXPECT_EQ(config->disk.tenant_codecs.at("lab").codec, "xkv");
  EXPECT_EQ(config->disk.tenant_codecs.at("lab").group_size, 0u);
  EXPECT_EQ(config->device_pool.bytes_per_layout, 2ull << 30);
  EXPECT_EQ(config->device_pool.block_tokens, 32u);
  EXPECT_EQ(config->device_pool.backend, "host");
  EXPECT_TRUE(config->device_pool.allow_host_fallback);
  EXPECT_EQ(config->device_pool.device, 1u);
  EXPECT_FALSE(config->device_pool.demote_ahead);
  EXPECT_EQ(config->keys.hash_algorithm, "sha256_cbor");
  EXPECT_EQ(config->log.level, "debug");
  EXPECT_EQ(config->control.event_ring_capacity, 1024u);
  EXPECT_EQ(config->metrics.listen_address, "127.0.0.1:9464");
  EXPECT_EQ(config->remote.listen_address, "0.0.0.0:7400");
  EXPECT_EQ(config->remote.peers, (std::vector<std::string>{"10.0.0.2:7400", "10.0.0.3:7400"}));
  EXPECT_EQ(config->remote.cluster_token_file, "/etc/strata/cluster-token");
  EXPECT_EQ(config->remote.node_id, "node-1");
  EXPECT_EQ(config->remote.lookup_budget_us, 500u);
  EXPECT_EQ(config->remote.fetch_timeout_ms, 5000u);
  EXPECT_EQ(config->remote.pd_lookup_budget_ms, 200u);
  EXPECT_EQ(config->remote.pd_deadline_ms, 30000u);
  EXPECT_EQ(config->remote.read_window_bytes, 8ull << 20);
  EXPECT_EQ(config->remote.transports, "tcp");
  EXPECT_EQ(config->cluster.controllers,
            (std::vector<std::string>{"10.0.0.9:50070", "10.0.0.10:50070"}));
  EXPECT_EQ(config->cluster.instance_id, "node-1");
  EXPECT_EQ(config->cluster.advertise_address, "node-1.internal:50051");
  EXPECT_EQ(config->cluster.token_file, "/etc/strata/controller-token");
  EXPECT_EQ(config->cluster.tls_ca_path, "/etc/strata/ca.pem");
  EXPECT_TRUE(ValidateConfig(*config).ok());
  DaemonConfig no_ring = *config;
  no_ring.control.event_ring_capacity = 0;
  EXPECT_EQ(ValidateConfig(no_ring).code(), absl::StatusCode::kInvalidArgument);
  DaemonConfig cert_only = *config;
  cert_only.control.tls_cert_path = "/etc/strata/cert.pem";
  EXPECT_EQ(ValidateConfig(cert_only).code(), absl::StatusCode::kInvalidArgument);

  absl::StatusOr<DaemonConfig> again = ApplyToml(ConfigToToml(*config), DaemonConfig());
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(ConfigToToml(*again), ConfigToToml(*config));
}

TEST(DaemonConfig, BadTomlIsAClearError) {
  const DaemonConfig base = DefaultConfig(Env(1ull << 34));
  auto code_and_message = [&](const char* text) {
    absl::StatusOr<DaemonConfig> c = ApplyToml(text, base);
    EXPECT_EQ(c.status().code(), absl::StatusCode::kInvalidArgument) << text;
    return std::string(c.status().message());
  };
  EXPECT_NE(code_and_message("[host]\ncapacity = 5\n").find("host.capacity"), std::string::npos);
  EXPECT_NE(code_and_message("[nope]\nx = 1\n").find("nope"), std::string::npos);
  EXPECT_NE(code_and_message("[host]\ncapacity_bytes = \"lots\"\n").find("byte size"),
            std::string::npos);
  EXPECT_NE(code_and_message("[host]\nuse_hugepages = 3\n").find("true or false"),
            std::string::npos);
  EXPECT_NE(code_and_message("[host\n").find("line"), std::string::npos);
  EXPECT_NE(code_and_message("[host]\nlease_ms = -4\n").find("lease_ms"), std::string::npos);
  // Floats are not integers, not even huge ones (found by tests/fuzz/config_fuzz).
  EXPECT_NE(code_and_message("[host]\npage_bytes = 4e96\n").find("byte size"), std::string::npos);
  EXPECT_NE(code_and_message("[host]\nlease_ms = 1.5\n").find("lease_ms"), std::string::npos);
  EXPECT_NE(code_and_message("[disk]\ntenant_codecs = 3\n").find("disk.tenant_codecs"),
            std::string::npos);
  EXPECT_NE(code_and_message("[disk.tenant_codecs]\na = 8\n").find("disk.tenant_codecs.a"),
            std::string::npos);
  EXPECT_NE(code_and_message("[disk.tenant_codecs]\na = { codec = \"int8\", level = 3 }\n")
                .find("disk.tenant_codecs.a.level"),
            std::string::npos);
  EXPECT_NE(code_and_message("[disk.tenant_codecs]\na = { bits = -2 }\n").find("bits"),
            std::string::npos);
}

TEST(DaemonConfig, ValidateCatchesCrossFieldMistakes) {
  DaemonConfig c = DefaultConfig(Env(1ull << 34));
  c.host.capacity_bytes += 1;
  EXPECT_EQ(ValidateConfig(c).code(), absl::StatusCode::kInvalidArgument);
  c = DefaultConfig(Env(1ull << 34));
  c.keys.hash_algorithm = "md5";
  EXPECT_EQ(ValidateConfig(c).code(), absl::StatusCode::kInvalidArgument);
  c = DefaultConfig(Env(1ull << 34));
  c.log.level = "loud";
  EXPECT_EQ(ValidateConfig(c).code(), absl::StatusCode::kInvalidArgument);
  c = DefaultConfig(Env(1ull << 34));
  c.host.hard_pin_quota_bytes = c.host.capacity_bytes + 1;
  EXPECT_EQ(ValidateConfig(c).code(), absl::StatusCode::kInvalidArgument);
  c = DefaultConfig(Env(1ull << 34));
  c.host.tenant_quotas["a"] = 0;
  EXPECT_EQ(ValidateConfig(c).code(), absl::StatusCode::kInvalidArgument);
  c.host.tenant_quotas["a"] = c.host.capacity_bytes + 1;
  EXPECT_EQ(ValidateConfig(c).code(), absl::StatusCode::kInvalidArgument);
  c = DefaultConfig(Env(1ull << 34));
  c.disk.directory = "/var/cache/strata";
  c.disk.capacity_bytes = 2 * c.disk.segment_bytes;  // fewer than 3 segments
  EXPECT_EQ(ValidateConfig(c).code(), absl::StatusCode::kInvalidArgument);
  c.disk.capacity_bytes = 3 * c.disk.segment_bytes;
  EXPECT_TRUE(ValidateConfig(c).ok());
  c.disk.write_through = true;
  EXPECT_TRUE(ValidateConfig(c).ok());
  c.disk.directory.clear();  // write-through without a disk tier
  EXPECT_EQ(ValidateConfig(c).code(), absl::StatusCode::kInvalidArgument);
  c.disk.write_through = false;
  c.disk.codec = "int8";  // a codec without a disk tier
  EXPECT_EQ(ValidateConfig(c).code(), absl::StatusCode::kInvalidArgument);
  c.disk.directory = "/var/cache/strata";
  EXPECT_TRUE(ValidateConfig(c).ok());
  c.disk.codec = "zip";
  EXPECT_EQ(ValidateConfig(c).code(), absl::StatusCode::kInvalidArgument);
  c.disk.codec = "drop_sink_recent";  // a tier keeps only what its loads restore whole
  EXPECT_EQ(ValidateConfig(c).code(), absl::StatusCode::kInvalidArgument);
  c.disk.codec = "kivi4";
  c.disk.codec_energy = 1.5;
  EXPECT_EQ(ValidateConfig(c).code(), absl::StatusCode::kInvalidArgument);
  c.disk.codec_energy = 0;
  c.disk.tenant_codecs["bulk"] = {.codec = "zip"};  // a tenant's codec no codec has
  EXPECT_EQ(ValidateConfig(c).code(), absl::StatusCode::kInvalidArgument);
  c.disk.tenant_codecs["bulk"] = {.codec = "xkv", .energy = 2};
  EXPECT_EQ(ValidateConfig(c).code(), absl::StatusCode::kInvalidArgument);
  c.disk.tenant_codecs["bulk"] = {.codec = "xkv", .energy = 0.9};
  EXPECT_TRUE(ValidateConfig(c).ok());
  c.disk.tenant_codecs[""] = {.codec = "int8"};  // no tenant named
  EXPECT_EQ(ValidateConfig(c).code(), absl::StatusCode::kInvalidArgument);
  c.disk.tenant_codecs.erase("");
  c.disk.directory.clear();  // tenants' codecs without a disk tier
  c.disk.codec.clear();
  EXPECT_EQ(ValidateConfig(c).code(), absl::StatusCode::kInvalidArgument);
  c.disk.tenant_codecs.clear();
  c.host.codec = "kivi4";  // [host] codec needs no disk tier
  c.host.tenant_codecs["exact"] = {};
  EXPECT_TRUE(ValidateConfig(c).ok());
  c.host.codec = "zip";
  EXPECT_EQ(ValidateConfig(c).code(), absl::StatusCode::kInvalidArgument);
  c.host.codec = "drop_h2o";
  EXPECT_EQ(ValidateConfig(c).code(), absl::StatusCode::kInvalidArgument);
  c.host.codec = "int8";
  c.host.tenant_codecs[""] = {.codec = "int8"};
  EXPECT_EQ(ValidateConfig(c).code(), absl::StatusCode::kInvalidArgument);
  c.host.tenant_codecs.clear();
  c.host.codec.clear();
  c.disk.directory = "/var/cache/strata";
  c = DefaultConfig(Env(1ull << 34));
  c.remote.listen_address = "127.0.0.1:7400";  // peers without a shared token
  EXPECT_EQ(ValidateConfig(c).code(), absl::StatusCode::kInvalidArgument);
  c.remote.cluster_token_file = "/etc/strata/cluster-token";
  EXPECT_TRUE(ValidateConfig(c).ok());
  c.remote.lookup_budget_us = 0;
  EXPECT_EQ(ValidateConfig(c).code(), absl::StatusCode::kInvalidArgument);
  c = DefaultConfig(Env(1ull << 34));
  c.remote.read_window_bytes = 4096;  // a window smaller than a layer's slice of a chunk
  EXPECT_EQ(ValidateConfig(c).code(), absl::StatusCode::kInvalidArgument);
  c.remote.read_window_bytes = 2ull << 30;
  EXPECT_EQ(ValidateConfig(c).code(), absl::StatusCode::kInvalidArgument);
  c = DefaultConfig(Env(1ull << 34));
  c.remote.peers = {"10.0.0.2:7400"};  // peers with the remote tier off
  EXPECT_EQ(ValidateConfig(c).code(), absl::StatusCode::kInvalidArgument);
  c = DefaultConfig(Env(1ull << 34));
  c.cluster.controllers = {"10.0.0.9:50070"};
  EXPECT_TRUE(ValidateConfig(c).ok());
  c.control.listen_address.clear();  // nothing the controller could dial
  EXPECT_EQ(ValidateConfig(c).code(), absl::StatusCode::kInvalidArgument);
  c.cluster.advertise_address = "unix:/run/strata/control.sock";
  EXPECT_TRUE(ValidateConfig(c).ok());
  c.cluster.controllers = {""};
  EXPECT_EQ(ValidateConfig(c).code(), absl::StatusCode::kInvalidArgument);
  c = DefaultConfig(Env(1ull << 34));
  EXPECT_EQ(c.device_pool.bytes_per_layout, 0u) << "no device pool unless asked for";
  EXPECT_TRUE(c.device_pool.demote_ahead);
  c.device_pool.bytes_per_layout = 1ull << 30;
  EXPECT_TRUE(ValidateConfig(c).ok());
  c.device_pool.block_tokens = 0;
  EXPECT_EQ(ValidateConfig(c).code(), absl::StatusCode::kInvalidArgument);
  c.device_pool.block_tokens = 16;
  c.device_pool.backend = "tpu";
  const absl::Status backend = ValidateConfig(c);
  EXPECT_EQ(backend.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(backend.ToString().find("device_pool.backend"), std::string::npos) << backend;
}

TEST(ClusterRegistration, AdvertisesTheBoundControlPortAndAnId) {
  DaemonConfig c = DefaultConfig(Env(1ull << 34));
  c.control.listen_address = "127.0.0.1:0";
  v1::RegisterInstanceRequest r = BuildRegistration(c, 50123, "", "");
  EXPECT_EQ(r.control_endpoint(), "127.0.0.1:50123");
  EXPECT_TRUE(r.instance_id().ends_with(":50123")) << r.instance_id();
  EXPECT_EQ(r.engine_endpoint(), c.engine.socket_path);
  EXPECT_EQ(r.peer_address(), "");

  c.control.listen_address = "0.0.0.0:50051";  // a wildcard: the hostname is dialled
  r = BuildRegistration(c, 50051, "node-7", "10.0.0.7:7400");
  EXPECT_FALSE(r.control_endpoint().starts_with("0.0.0.0")) << r.control_endpoint();
  EXPECT_EQ(r.instance_id(), "node-7") << "the remote tier's node id";
  EXPECT_EQ(r.peer_address(), "10.0.0.7:7400");

  c.cluster.instance_id = "chosen";
  c.cluster.advertise_address = "node.example:6000";
  r = BuildRegistration(c, 50051, "node-7", "");
  EXPECT_EQ(r.instance_id(), "chosen");
  EXPECT_EQ(r.control_endpoint(), "node.example:6000");
}

TEST(ParseCommandLine, FlagsOverrideAndHelpStops) {
  const ConfigEnvironment env = Env(1ull << 34);
  const char* args[] = {"stratad",     "--host-capacity", "256MiB",      "--log-level",
                        "warn",        "--engine-socket", "/tmp/e.sock", "--metrics-listen",
                        "0.0.0.0:9464"};
  absl::StatusOr<std::optional<DaemonConfig>> parsed =
      ParseCommandLine(9, const_cast<char**>(args), env);
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  ASSERT_TRUE(parsed->has_value());
  EXPECT_EQ((*parsed)->host.capacity_bytes, 256ull << 20);
  EXPECT_EQ((*parsed)->log.level, "warn");
  EXPECT_EQ((*parsed)->engine.socket_path, "/tmp/e.sock");
  EXPECT_EQ((*parsed)->metrics.listen_address, "0.0.0.0:9464");
  EXPECT_EQ(DefaultConfig(env).metrics.listen_address, "127.0.0.1:9464") << "on, localhost";
  const char* off[] = {"stratad", "--no-metrics"};
  parsed = ParseCommandLine(2, const_cast<char**>(off), env);
  ASSERT_TRUE(parsed.ok() && parsed->has_value()) << parsed.status();
  EXPECT_TRUE((*parsed)->metrics.listen_address.empty());

  const char* bad[] = {"stratad", "--no-such-flag"};
  EXPECT_EQ(ParseCommandLine(2, const_cast<char**>(bad), env).status().code(),
            absl::StatusCode::kInvalidArgument);
  const char* missing[] = {"stratad", "--config", "/nonexistent/strata.toml"};
  EXPECT_EQ(ParseCommandLine(3, const_cast<char**>(missing), env).status().code(),
            absl::StatusCode::kInvalidArgument);
  const char* unaligned[] = {"stratad", "--host-capacity", "1000"};
  EXPECT_EQ(ParseCommandLine(3, const_cast<char**>(unaligned), env).status().code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace strata::daemon
