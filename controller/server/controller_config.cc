#include "controller/server/controller_config.h"

#include <algorithm>
#include <iostream>
#include <sstream>

#include "CLI/CLI.hpp"
#include "core/fmt_absl.h"
#include "core/key_hasher.h"
#include "core/status_macros.h"
#include "core/toml_fields.h"
#include "fmt/format.h"
#include "toml++/toml.h"

namespace strata::controller {
namespace {

absl::Status Bad(std::string message) { return absl::InvalidArgumentError(std::move(message)); }

absl::Status ApplyTable(const toml::table& root, ControllerConfig& c) {
  return ForEachTomlField(root, [&c](std::string_view section, std::string_view key,
                                     const std::string& name, const toml::node& value) {
    absl::Status s = UnknownTomlKey(name);
    if (section == "controller") {
      auto& l = c.controller;
      if (key == "listen_address") s = ReadTomlString(value, name, l.listen_address);
      if (key == "tls_cert_path") s = ReadTomlString(value, name, l.tls_cert_path);
      if (key == "tls_key_path") s = ReadTomlString(value, name, l.tls_key_path);
      if (key == "auth_token_file") s = ReadTomlString(value, name, l.auth_token_file);
      if (key == "instance_timeout_ms") s = ReadTomlUint(value, name, l.instance_timeout_ms);
      if (key == "heartbeat_interval_ms") s = ReadTomlUint(value, name, l.heartbeat_interval_ms);
      if (key == "max_instances") s = ReadTomlUint(value, name, l.max_instances);
    } else if (section == "daemons") {
      auto& d = c.daemons;
      if (key == "auth_token_file") s = ReadTomlString(value, name, d.auth_token_file);
      if (key == "tls_ca_path") s = ReadTomlString(value, name, d.tls_ca_path);
      if (key == "unreachable_timeout_ms") {
        s = ReadTomlUint(value, name, d.unreachable_timeout_ms);
      }
    } else if (section == "keys") {
      if (key == "hash_algorithm") s = ReadTomlString(value, name, c.keys.hash_algorithm);
      if (key == "seed") s = ReadTomlString(value, name, c.keys.seed);
    } else if (section == "route") {
      auto& r = c.route;
      if (key == "prefill_us_per_token") {
        s = ReadTomlNonNegative(value, name, r.prefill_us_per_token);
      }
      if (key == "host_bytes_per_s") s = ReadTomlNonNegative(value, name, r.host_bytes_per_s);
      if (key == "disk_bytes_per_s") s = ReadTomlNonNegative(value, name, r.disk_bytes_per_s);
      if (key == "remote_bytes_per_s") {
        s = ReadTomlNonNegative(value, name, r.remote_bytes_per_s);
      }
    } else if (section == "cluster") {
      auto& k = c.cluster;
      if (key == "etcd_endpoints") s = ReadTomlStrings(value, name, k.etcd_endpoints);
      if (key == "election_key") s = ReadTomlString(value, name, k.election_key);
      if (key == "lease_ttl_s") s = ReadTomlUint(value, name, k.lease_ttl_s);
      if (key == "advertise_address") s = ReadTomlString(value, name, k.advertise_address);
    } else if (section == "vllm") {
      auto& v = c.vllm;
      if (key == "instances") s = ReadTomlStrings(value, name, v.instances);
      if (key == "topic") s = ReadTomlString(value, name, v.topic);
      if (key == "model") s = ReadTomlString(value, name, v.model);
      if (key == "kind") s = ReadTomlString(value, name, v.kind);
      if (key == "layers") s = ReadTomlUint(value, name, v.layers);
      if (key == "kv_heads") s = ReadTomlUint(value, name, v.kv_heads);
      if (key == "head_dim") s = ReadTomlUint(value, name, v.head_dim);
      if (key == "dtype") s = ReadTomlString(value, name, v.dtype);
      if (key == "tp_rank") s = ReadTomlUint(value, name, v.tp_rank);
      if (key == "tp_size") s = ReadTomlUint(value, name, v.tp_size);
      if (key == "block_size") s = ReadTomlUint(value, name, v.block_size);
    } else if (section == "log") {
      if (key == "level") s = ReadTomlString(value, name, c.log.level);
    } else {
      s = UnknownTomlSection(section);
    }
    return s;
  });
}

std::string ConfigToToml(const ControllerConfig& c) {
  toml::array endpoints;
  for (const std::string& endpoint : c.cluster.etcd_endpoints) endpoints.push_back(endpoint);
  toml::array vllm_instances;
  for (const std::string& instance : c.vllm.instances) vllm_instances.push_back(instance);
  const toml::table root{
      {"controller",
       toml::table{
           {"listen_address", c.controller.listen_address},
           {"tls_cert_path", c.controller.tls_cert_path},
           {"tls_key_path", c.controller.tls_key_path},
           {"auth_token_file", c.controller.auth_token_file},
           {"instance_timeout_ms", static_cast<int64_t>(c.controller.instance_timeout_ms)},
           {"heartbeat_interval_ms", static_cast<int64_t>(c.controller.heartbeat_interval_ms)},
           {"max_instances", static_cast<int64_t>(c.controller.max_instances)}}},
      {"daemons", toml::table{{"auth_token_file", c.daemons.auth_token_file},
                              {"tls_ca_path", c.daemons.tls_ca_path},
                              {"unreachable_timeout_ms",
                               static_cast<int64_t>(c.daemons.unreachable_timeout_ms)}}},
      {"keys", toml::table{{"hash_algorithm", c.keys.hash_algorithm}, {"seed", c.keys.seed}}},
      {"route", toml::table{{"prefill_us_per_token", c.route.prefill_us_per_token},
                            {"host_bytes_per_s", c.route.host_bytes_per_s},
                            {"disk_bytes_per_s", c.route.disk_bytes_per_s},
                            {"remote_bytes_per_s", c.route.remote_bytes_per_s}}},
      {"cluster", toml::table{{"etcd_endpoints", endpoints},
                              {"election_key", c.cluster.election_key},
                              {"lease_ttl_s", static_cast<int64_t>(c.cluster.lease_ttl_s)},
                              {"advertise_address", c.cluster.advertise_address}}},
      {"vllm", toml::table{{"instances", vllm_instances},
                           {"topic", c.vllm.topic},
                           {"model", c.vllm.model},
                           {"kind", c.vllm.kind},
                           {"layers", static_cast<int64_t>(c.vllm.layers)},
                           {"kv_heads", static_cast<int64_t>(c.vllm.kv_heads)},
                           {"head_dim", static_cast<int64_t>(c.vllm.head_dim)},
                           {"dtype", c.vllm.dtype},
                           {"tp_rank", static_cast<int64_t>(c.vllm.tp_rank)},
                           {"tp_size", static_cast<int64_t>(c.vllm.tp_size)},
                           {"block_size", static_cast<int64_t>(c.vllm.block_size)}}},
      {"log", toml::table{{"level", c.log.level}}},
  };
  std::ostringstream out;
  out << root << "\n";
  return out.str();
}

}  // namespace

absl::StatusOr<ControllerConfig> ApplyControllerToml(std::string_view toml_text,
                                                     ControllerConfig base) {
  STRATA_ASSIGN_OR_RETURN(const toml::table root, ParseTomlText(toml_text));
  STRATA_RETURN_IF_ERROR(ApplyTable(root, base));
  return base;
}

absl::StatusOr<std::vector<VllmInstanceConfig>> VllmInstances(const ControllerConfig::Vllm& vllm) {
  std::vector<VllmInstanceConfig> instances;
  for (const std::string& entry : vllm.instances) {
    const size_t equals = entry.find('=');
    if (equals == std::string::npos || equals == 0 || equals + 1 == entry.size()) {
      return Bad(
          fmt::format("config: vllm.instances entry '{}' is not \"id=tcp://host:port\"", entry));
    }
    VllmInstanceConfig instance{.instance_id = entry.substr(0, equals),
                                .endpoint = entry.substr(equals + 1)};
    for (const VllmInstanceConfig& other : instances) {
      if (other.instance_id == instance.instance_id) {
        return Bad(fmt::format("config: vllm.instances names '{}' twice", instance.instance_id));
      }
    }
    instances.push_back(std::move(instance));
  }
  return instances;
}

absl::StatusOr<KvLayout> VllmLayout(const ControllerConfig::Vllm& vllm) {
  KvLayout layout;
  layout.model_id = vllm.model;
  absl::StatusOr<KvKind> kind = ParseKvKind(vllm.kind);
  if (!kind.ok()) return Bad(fmt::format("config: vllm.kind: {}", kind.status().message()));
  layout.kind = *kind;
  absl::StatusOr<KvDtype> dtype = ParseKvDtype(vllm.dtype);
  if (!dtype.ok()) return Bad(fmt::format("config: vllm.dtype: {}", dtype.status().message()));
  layout.dtype = *dtype;
  layout.num_layers = vllm.layers;
  layout.num_kv_heads = vllm.kv_heads;
  layout.head_dim = vllm.head_dim;
  layout.tp_rank = vllm.tp_rank;
  layout.tp_world_size = vllm.tp_size;
  layout.positional = PositionalFormat::kRopeApplied;
  layout.chunk_tokens = vllm.block_size;
  if (absl::Status valid = layout.Validate(); !valid.ok()) {
    return Bad(fmt::format("config: the [vllm] layout: {}", valid.message()));
  }
  return layout;
}

uint32_t HeartbeatIntervalMs(const ControllerConfig& c) {
  return c.controller.heartbeat_interval_ms != 0 ? c.controller.heartbeat_interval_ms
                                                 : c.controller.instance_timeout_ms / 5;
}

absl::Status ValidateControllerConfig(const ControllerConfig& c) {
  if (c.controller.listen_address.empty()) return Bad("config: controller.listen_address is empty");
  if (c.controller.tls_cert_path.empty() != c.controller.tls_key_path.empty()) {
    return Bad("config: controller.tls_cert_path and controller.tls_key_path go together");
  }
  if (c.controller.instance_timeout_ms < 5) {
    return Bad("config: controller.instance_timeout_ms must be at least 5");
  }
  if (c.controller.heartbeat_interval_ms >= c.controller.instance_timeout_ms) {
    return Bad(
        fmt::format("config: controller.heartbeat_interval_ms ({}) must be below "
                    "controller.instance_timeout_ms ({})",
                    c.controller.heartbeat_interval_ms, c.controller.instance_timeout_ms));
  }
  if (c.controller.max_instances == 0 || c.controller.max_instances > 65536) {
    return Bad("config: controller.max_instances must lie in 1..65536");
  }
  if (c.daemons.unreachable_timeout_ms == 0) {
    return Bad("config: daemons.unreachable_timeout_ms must be positive");
  }
  if (absl::StatusOr<HashAlgorithm> a = ParseHashAlgorithm(c.keys.hash_algorithm); !a.ok()) {
    return Bad(fmt::format("config: keys.hash_algorithm: {}", a.status().message()));
  }
  if (c.route.prefill_us_per_token <= 0) {
    return Bad("config: route.prefill_us_per_token must be positive");
  }
  for (double bandwidth :
       {c.route.host_bytes_per_s, c.route.disk_bytes_per_s, c.route.remote_bytes_per_s}) {
    if (bandwidth <= 0) return Bad("config: a route.*_bytes_per_s must be positive");
  }
  if (!c.cluster.etcd_endpoints.empty() &&
      (c.cluster.election_key.empty() || c.cluster.lease_ttl_s < 2 || c.cluster.lease_ttl_s > 60)) {
    return Bad("config: cluster.election_key must be set and cluster.lease_ttl_s lie in 2..60");
  }
  for (const std::string& endpoint : c.cluster.etcd_endpoints) {
    if (endpoint.empty()) return Bad("config: cluster.etcd_endpoints holds an empty address");
  }
  if (!c.vllm.instances.empty()) {
    STRATA_RETURN_IF_ERROR(VllmInstances(c.vllm).status());
    STRATA_RETURN_IF_ERROR(VllmLayout(c.vllm).status());
  }
  STRATA_RETURN_IF_ERROR(CheckLogLevel("log.level", c.log.level));
  return absl::OkStatus();
}

absl::StatusOr<std::optional<ControllerConfig>> ParseControllerCommandLine(int argc, char** argv) {
  CLI::App app{"strata-controller: the Strata cluster's KV index and router"};
  std::string config_path;
  bool print_config = false;
  std::optional<std::string> listen, auth_token_file, log_level;
  std::optional<uint32_t> instance_timeout_ms;
  std::vector<std::string> etcd_endpoints;
  app.add_option("-c,--config", config_path, "TOML configuration file");
  app.add_flag("--print-config", print_config, "print the effective configuration and exit");
  app.add_option("--listen", listen, "the cluster API's address, host:port");
  app.add_option("--auth-token-file", auth_token_file,
                 "file holding the bearer token every caller must present");
  app.add_option("--instance-timeout-ms", instance_timeout_ms, "drop a daemon silent this long");
  app.add_option("--log-level", log_level, "trace|debug|info|warn|error|critical|off");
  app.add_option("--etcd-endpoints", etcd_endpoints,
                 "etcd client addresses (host:port): lead only while holding the election key")
      ->delimiter(',');
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    std::cout << app.help();
    return std::optional<ControllerConfig>();
  } catch (const CLI::ParseError& e) {
    return Bad(fmt::format("command line: {}", e.what()));
  }
  ControllerConfig config;
  if (!config_path.empty()) {
    STRATA_ASSIGN_OR_RETURN(const std::string text, ReadConfigFile(config_path));
    STRATA_ASSIGN_OR_RETURN(config, ApplyControllerToml(text, std::move(config)));
  }
  if (listen) config.controller.listen_address = *listen;
  if (auth_token_file) config.controller.auth_token_file = *auth_token_file;
  if (instance_timeout_ms) config.controller.instance_timeout_ms = *instance_timeout_ms;
  if (log_level) config.log.level = *log_level;
  if (!etcd_endpoints.empty()) config.cluster.etcd_endpoints = etcd_endpoints;
  STRATA_RETURN_IF_ERROR(ValidateControllerConfig(config));
  if (print_config) {
    std::cout << ConfigToToml(config);
    return std::optional<ControllerConfig>();
  }
  return std::optional<ControllerConfig>(std::move(config));
}

}  // namespace strata::controller
