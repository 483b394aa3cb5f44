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
[vllm]
instances = ["vllm-a=tcp://10.0.0.5:5557", "vllm-b=tcp://10.0.0.6:5557"]
topic = "kv"
model = "meta-llama/Llama-3.1-8B"
kind = "gqa"
layers = 32
kv_heads = 8
head_dim = 128
dtype = "fp16"
tp_rank = 1
tp_size = 2
block_size = 32
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
  absl::StatusOr<std::vector<VllmInstanceConfig>> instances = VllmInstances(config->vllm);
  ASSERT_TRUE(instances.ok()) << instances.status();
  ASSERT_EQ(instances->size(), 2u);
  EXPECT_EQ((*instances)[1].instance_id, "vllm-b");
  EXPECT_EQ((*instances)[1].endpoint, "tcp://10.0.0.6:5557");
  EXPECT_EQ(config->vllm.topic, "kv");
  absl::StatusOr<KvLayout> layout = VllmLayout(config->vllm);
  ASSERT_TRUE(layout.ok()) << layout.status();
  EXPECT_EQ(layout->model_id, "meta-llama/Llama-3.1-8B");
  EXPECT_EQ(layout->num_layers, 32u);
  EXPECT_EQ(layout->num_kv_heads, 8u);
  EXPECT_EQ(layout->head_dim, 128u);
  EXPECT_EQ(layout->dtype, KvDtype::kFloat16);
  EXPECT_EQ(layout->tp_rank, 1u);
  EXPECT_EQ(layout->tp_world_size, 2u);
  EXPECT_EQ(layout->chunk_tokens, 32u);
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

TEST(ControllerConfigTest, VllmInstancesNeedIdsEndpointsAndALayout) {
  ControllerConfig config;
  config.vllm.model = "m";
  config.vllm.layers = 2;
  config.vllm.kv_heads = 2;
  config.vllm.head_dim = 64;
  EXPECT_TRUE(ValidateControllerConfig(config).ok());
  config.vllm.instances = {"a=tcp://127.0.0.1:5557"};
  EXPECT_TRUE(ValidateControllerConfig(config).ok());
  for (const std::vector<std::string>& bad : std::vector<std::vector<std::string>>{
           {"tcp://127.0.0.1:5557"}, {"=tcp://x:1"}, {"a="}, {"a=tcp://x:1", "a=tcp://y:1"}}) {
    config.vllm.instances = bad;
    const absl::Status status = ValidateControllerConfig(config);
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << bad[0];
    EXPECT_NE(status.message().find("vllm.instances"), std::string_view::npos) << status;
  }
  config.vllm.instances = {"a=tcp://127.0.0.1:5557"};
  config.vllm.layers = 0;  // no layout: the engines' keys cannot be computed
  EXPECT_NE(ValidateControllerConfig(config).message().find("[vllm] layout"),
            std::string_view::npos);
  config.vllm.layers = 2;
  config.vllm.dtype = "fp7";
  EXPECT_NE(ValidateControllerConfig(config).message().find("vllm.dtype"), std::string_view::npos);
}

}  // namespace
}  // namespace strata::controller
