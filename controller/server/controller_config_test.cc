#include "controller/server/controller_config.h"

#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace strata::controller {
namespace {

TEST(ControllerConfigTest, TheDefaultRunsAloneOnLoopback) {
  const ControllerConfig config;
  EXPECT_TRUE(ValidateControllerConfig(config).ok());
  EXPECT_EQ(config.controller.listen_address, "127.0.0.1:50070");
  EXPECT_EQ(HeartbeatIntervalMs(config), 2'000u) << "a fifth of the 10 s timeout";
}

TEST(ControllerConfigTest, TomlSetsEveryKey) {
  absl::StatusOr<ControllerConfig> config = ApplyControllerToml(R"(
[controller]
listen_address = "0.0.0.0:6000"
tls_cert_path = "/c.pem"
tls_key_path = "/k.pem"
auth_token_file = "/token"
instance_timeout_ms = 3000
heartbeat_interval_ms = 500
max_instances = 100
[daemons]
auth_token_file = "/daemon-token"
tls_ca_path = "/ca.pem"
unreachable_timeout_ms = 700
[keys]
hash_algorithm = "sha256_cbor"
seed = "42"
[route]
prefill_us_per_token = 55.5
host_bytes_per_s = 2e10
disk_bytes_per_s = 3000000000
remote_bytes_per_s = 1.5e9
[cluster]
etcd_endpoints = ["127.0.0.1:2379", "etcd-b:2379"]
election_key = "/prod/strata/leader"
lease_ttl_s = 3
advertise_address = "ctl-a:6000"
[log]
level = "warn"
)",
                                                                ControllerConfig());
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_TRUE(ValidateControllerConfig(*config).ok());
  EXPECT_EQ(config->controller.listen_address, "0.0.0.0:6000");
  EXPECT_EQ(config->controller.auth_token_file, "/token");
  EXPECT_EQ(HeartbeatIntervalMs(*config), 500u);
  EXPECT_EQ(config->controller.max_instances, 100u);
  EXPECT_EQ(config->daemons.tls_ca_path, "/ca.pem");
  EXPECT_EQ(config->daemons.unreachable_timeout_ms, 700u);
  EXPECT_EQ(config->keys.hash_algorithm, "sha256_cbor");
  EXPECT_DOUBLE_EQ(config->route.prefill_us_per_token, 55.5);
  EXPECT_DOUBLE_EQ(config->route.disk_bytes_per_s, 3e9);
  EXPECT_EQ(config->log.level, "warn");
  EXPECT_EQ(config->cluster.etcd_endpoints,
            (std::vector<std::string>{"127.0.0.1:2379", "etcd-b:2379"}));
  EXPECT_EQ(config->cluster.election_key, "/prod/strata/leader");
  EXPECT_EQ(config->cluster.lease_ttl_s, 3u);
  EXPECT_EQ(config->cluster.advertise_address, "ctl-a:6000");
}

TEST(ControllerConfigTest, BadKeysAndValuesAreNamed) {
  const std::pair<const char*, const char*> bad[] = {
      {"[controller]\nlisten = \"x\"\n", "controller.listen"},
      {"[nowhere]\nkey = 1\n", "nowhere"},
      {"[controller]\ninstance_timeout_ms = -1\n", "controller.instance_timeout_ms"},
      {"[route]\ndisk_bytes_per_s = -5\n", "route.disk_bytes_per_s"},
      {"[route]\nhost_bytes_per_s = \"fast\"\n", "route.host_bytes_per_s"},
      {"[controller\n", "line 1"},
  };
  for (const auto& [toml, named] : bad) {
    absl::StatusOr<ControllerConfig> config = ApplyControllerToml(toml, ControllerConfig());
    ASSERT_FALSE(config.ok()) << toml;
    EXPECT_NE(config.status().message().find(named), std::string_view::npos)
        << config.status().message();
  }
}

TEST(ControllerConfigTest, CrossFieldRules) {
  ControllerConfig config;
  config.controller.heartbeat_interval_ms = config.controller.instance_timeout_ms;
  EXPECT_FALSE(ValidateControllerConfig(config).ok());
  config = ControllerConfig();
  config.controller.tls_cert_path = "/c.pem";
  EXPECT_FALSE(ValidateControllerConfig(config).ok());
  config = ControllerConfig();
  config.keys.hash_algorithm = "md5";
  EXPECT_FALSE(ValidateControllerConfig(config).ok());
  config = ControllerConfig();
  config.route.remote_bytes_per_s = 0;
  EXPECT_FALSE(ValidateControllerConfig(config).ok());
  config = ControllerConfig();
  config.controller.max_instances = 70'000;
  EXPECT_FALSE(ValidateControllerConfig(config).ok());
  config = ControllerConfig();
  config.log.level = "loud";
  EXPECT_FALSE(ValidateControllerConfig(config).ok());
  config = ControllerConfig();
  config.cluster.etcd_endpoints = {"127.0.0.1:2379"};
  EXPECT_TRUE(ValidateControllerConfig(config).ok());
  config.cluster.lease_ttl_s = 1;  // below etcd's minimum
  EXPECT_FALSE(ValidateControllerConfig(config).ok());
  config.cluster.lease_ttl_s = 2;
  config.cluster.etcd_endpoints = {""};
  EXPECT_FALSE(ValidateControllerConfig(config).ok());
}

}  // namespace
}  // namespace strata::controller
