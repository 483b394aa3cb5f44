// ControllerConfig is everything strata-controller can be told: an embedded default that runs a
// single controller on loopback, overridden by a TOML file, overridden by command-line flags.
// A plain value type.
//
// TOML (every key optional):
//   [controller] listen_address (the cluster API, StrataCluster; default "127.0.0.1:50070"),
//                tls_cert_path + tls_key_path (PEM; TLS, both or neither), auth_token_file (a
//                file holding the bearer token every caller, daemons included, must present;
//                "" accepts every caller), instance_timeout_ms (a daemon silent this long is
//                dropped, default 10000), heartbeat_interval_ms (asked of the daemons; below
//                the timeout; 0, the default: a fifth of it), max_instances (default 4096)
//   [daemons]    auth_token_file (the token the daemons' control APIs require; "" none),
//                tls_ca_path (the root that signs the daemons' TLS certificates; "" plaintext),
//                unreachable_timeout_ms (a registered daemon whose control API cannot be reached
//                this long has its chunks cleared from answers until it answers; default 5000)
//   [keys]       hash_algorithm, seed (the daemons' key protocol: Lookup and Route hash token
//                prompts with it)
//   [route]      prefill_us_per_token, and the bytes per second from each tier into an engine:
//                host_bytes_per_s, disk_bytes_per_s, remote_bytes_per_s (controller/routing/
//                ttft_model.h documents the model and its defaults)
//   [cluster]    etcd_endpoints (etcd client "host:port"s: with them, this controller is one of
//                several and leads only while it holds the election key; empty (the default):
//                it runs alone and leads), election_key (default "/strata/controller/leader"),
//                lease_ttl_s (the leader's etcd lease, default 2: a standby leads within about
//                that long of the leader's death), advertise_address (what this controller is
//                known as while it leads; "" : controller.listen_address with the bound port, a
//                wildcard host replaced by the hostname)
//   [vllm]       plain vLLM engines (no Strata daemon) indexed from the KV events they publish
//                over ZMQ (controller/ingest/vllm_feed.h): instances ("id=tcp://host:port", each
//                an instance id and the engine's kv_events_config endpoint; default none),
//                topic (the subscription's topic prefix, default "": every message), and the
//                engines' KV layout, whose chunk is their block size: model, kind, layers,
//                kv_heads, head_dim, dtype, tp_rank, tp_size, block_size (default 16). Their
//                keys are computed with [keys] from the events' token ids; with sha256_cbor and
//                vLLM's PYTHONHASHSEED as the seed they are checked against the engines' hashes.
//                An engine disconnected for daemons.unreachable_timeout_ms is cleared from answers
//   [log]        level ("trace" .. "critical", "off")
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "core/kv_layout.h"

namespace strata::controller {

struct ControllerConfig {
  struct Listen {
    std::string listen_address = "127.0.0.1:50070";
    std::string tls_cert_path;
    std::string tls_key_path;
    std::string auth_token_file;
    uint32_t instance_timeout_ms = 10'000;
    uint32_t heartbeat_interval_ms = 0;
    uint32_t max_instances = 4096;
  } controller;
  struct Daemons {
    std::string auth_token_file;
    std::string tls_ca_path;
    uint32_t unreachable_timeout_ms = 5'000;
  } daemons;
  struct Keys {
    std::string hash_algorithm = "xxh3_128";
    std::string seed = "0";
  } keys;
  struct Route {
    double prefill_us_per_token = 40;
    double host_bytes_per_s = 25e9;
    double disk_bytes_per_s = 1.4e9;
    double remote_bytes_per_s = 2e9;
  } route;
  struct Cluster {
    std::vector<std::string> etcd_endpoints;
    std::string election_key = "/strata/controller/leader";
    uint32_t lease_ttl_s = 2;
    std::string advertise_address;
  } cluster;
  struct Vllm {
    std::vector<std::string> instances;
    std::string topic;
    std::string model;
    std::string kind = "mha";
    uint32_t layers = 0;
    uint32_t kv_heads = 0;
    uint32_t head_dim = 0;
    std::string dtype = "bf16";
    uint32_t tp_rank = 0;
    uint32_t tp_size = 1;
    uint32_t block_size = 16;
  } vllm;
  struct Log {
    std::string level = "info";
  } log;
};

// One [vllm] instance: "id=endpoint".
struct VllmInstanceConfig {
  std::string instance_id;
  std::string endpoint;
};

// The [vllm] instances, parsed. kInvalidArgument naming the entry for one without an id or an
// endpoint, or an id given twice.
absl::StatusOr<std::vector<VllmInstanceConfig>> VllmInstances(const ControllerConfig::Vllm& vllm);

// The [vllm] engines' KV layout (rope_applied: vLLM's prefix cache). kInvalidArgument naming the
// field that does not parse or validate.
absl::StatusOr<KvLayout> VllmLayout(const ControllerConfig::Vllm& vllm);

// Applies a TOML document on top of `base`. kInvalidArgument naming the key (and the line for
// syntax errors) for malformed TOML, unknown keys or wrong types.
absl::StatusOr<ControllerConfig> ApplyControllerToml(std::string_view toml_text,
                                                     ControllerConfig base);

// The heartbeat interval asked of the daemons: heartbeat_interval_ms, or a fifth of the timeout.
uint32_t HeartbeatIntervalMs(const ControllerConfig& config);

// Checks cross-field rules (the heartbeat below the timeout, a known hash algorithm, ...).
absl::Status ValidateControllerConfig(const ControllerConfig& config);

// Parses strata-controller's command line: --config FILE, --print-config, and flags that override
// single keys (--listen, --auth-token-file, --instance-timeout-ms, --log-level). Returns the
// validated config, or nullopt when only help or the config was asked for (already printed).
absl::StatusOr<std::optional<ControllerConfig>> ParseControllerCommandLine(int argc, char** argv);

}  // namespace strata::controller
