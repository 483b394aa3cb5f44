#include "daemon/config.h"

#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <iostream>
#include <sstream>

#include "CLI/CLI.hpp"
#include "core/byte_size.h"
#include "core/chunk_key.h"
#include "core/fmt_absl.h"
#include "core/status_macros.h"
#include "core/toml_fields.h"
#include "fmt/format.h"
#include "storage/codec/codec_choice.h"
#include "storage/device/device_runtime_factory.h"
#include "storage/host/host_tier.h"
#include "toml++/toml.h"

namespace strata::daemon {
namespace {

constexpr uint64_t kDefaultMaxHostBytes = uint64_t{8} << 30;

absl::Status Bad(std::string message) { return absl::InvalidArgumentError(std::move(message)); }

std::string SocketDir(const ConfigEnvironment& env) {
  return env.runtime_dir.empty() ? "./var/run/strata" : env.runtime_dir + "/strata";
}

// "a,b,,c" -> {"a", "b", "c"}.
std::vector<std::string> SplitList(std::string_view list) {
  std::vector<std::string> items;
  for (std::string_view rest = list; !rest.empty();) {
    const size_t comma = rest.find(',');
    if (comma != 0) items.emplace_back(rest.substr(0, comma));
    rest = comma == std::string_view::npos ? std::string_view() : rest.substr(comma + 1);
  }
  return items;
}

// Reads [host.tenant_quotas]: tenant = byte size.
absl::Status ReadTenantQuotas(const toml::node& node, std::string_view key,
                              std::map<std::string, uint64_t>& out) {
  const toml::table* table = node.as_table();
  if (table == nullptr) return Bad(fmt::format("config: {} must be a table", key));
  for (const auto& [tenant, value] : *table) {
    uint64_t bytes = 0;
    const std::string name = fmt::format("{}.{}", key, tenant.str());
    if (absl::Status s = ReadTomlBytes(value, name, bytes); !s.ok()) return s;
    out[std::string(tenant.str())] = bytes;
  }
  return absl::OkStatus();
}

// Reads [host.tenant_codecs] or [disk.tenant_codecs]: tenant = "codec", or tenant = { codec,
// group_size, bits, energy }.
absl::Status ReadTenantCodecs(const toml::node& node, std::string_view key,
                              std::map<std::string, DaemonConfig::TenantCodec>& out) {
  const toml::table* table = node.as_table();
  if (table == nullptr) return Bad(fmt::format("config: {} must be a table", key));
  for (const auto& [tenant, value] : *table) {
    const std::string name = fmt::format("{}.{}", key, tenant.str());
    DaemonConfig::TenantCodec choice;
    const toml::table* fields = value.as_table();
    if (fields == nullptr) {
      if (absl::Status s = ReadTomlString(value, name, choice.codec); !s.ok()) return s;
    }
    for (const auto& [field, setting] : fields == nullptr ? toml::table() : *fields) {
      const std::string field_name = fmt::format("{}.{}", name, field.str());
      absl::Status s = UnknownTomlKey(field_name);
      if (field == "codec") s = ReadTomlString(setting, field_name, choice.codec);
      if (field == "group_size") s = ReadTomlUint(setting, field_name, choice.group_size);
      if (field == "bits") s = ReadTomlUint(setting, field_name, choice.bits);
      if (field == "energy") s = ReadTomlNonNegative(setting, field_name, choice.energy);
      if (!s.ok()) return s;
    }
    out[std::string(tenant.str())] = std::move(choice);
  }
  return absl::OkStatus();
}

// OK when `codec` names a codec (or is "") and `energy` lies in [0, 1]; the keys name the
// settings in the error.
absl::Status CheckCodecChoice(std::string_view codec_key, const std::string& codec,
                              std::string_view energy_key, double energy) {
  if (!codec.empty()) {
    if (absl::StatusOr<const storage::Codec*> found = storage::FindTierCodec(codec); !found.ok()) {
      return Bad(fmt::format("config: {}: {}", codec_key, found.status().message()));
    }
  }
  if (energy < 0 || energy > 1) {
    return Bad(fmt::format("config: {}={} must lie in [0, 1]", energy_key, energy));
  }
  return absl::OkStatus();
}

// Reads `key` when it is one of a tier's codec keys ([host] and [disk]: codec, codec_group_size,
// codec_bits, codec_energy, tenant_codecs) into `tier`; nullopt for any other key.
template <typename Tier>
std::optional<absl::Status> ReadCodecKey(std::string_view key, const std::string& name,
                                         const toml::node& value, Tier& tier) {
  if (key == "codec") return ReadTomlString(value, name, tier.codec);
  if (key == "codec_group_size") return ReadTomlUint(value, name, tier.codec_group_size);
  if (key == "codec_bits") return ReadTomlUint(value, name, tier.codec_bits);
  if (key == "codec_energy") return ReadTomlNonNegative(value, name, tier.codec_energy);
  if (key == "tenant_codecs") return ReadTenantCodecs(value, name, tier.tenant_codecs);
  return std::nullopt;
}

// OK when a tier's codec keys name codecs and energies in [0, 1] and its tenant codecs name
// tenants; `section` names the tier's section in errors.
template <typename Tier>
absl::Status CheckTierCodecs(std::string_view section, const Tier& tier) {
  STRATA_RETURN_IF_ERROR(CheckCodecChoice(fmt::format("{}.codec", section), tier.codec,
                                          fmt::format("{}.codec_energy", section),
                                          tier.codec_energy));
  for (const auto& [tenant, choice] : tier.tenant_codecs) {
    const std::string key = fmt::format("{}.tenant_codecs.'{}'", section, tenant);
    if (tenant.empty()) return Bad(fmt::format("config: {} must name a tenant", key));
    STRATA_RETURN_IF_ERROR(CheckCodecChoice(key, choice.codec, key + ".energy", choice.energy));
  }
  return absl::OkStatus();
}

// A tier's codec keys as TOML, into its section's table.
template <typename Tier>
void InsertCodecKeys(const Tier& tier, toml::table& section) {
  section.insert("codec", tier.codec);
  section.insert("codec_group_size", static_cast<int64_t>(tier.codec_group_size));
  section.insert("codec_bits", static_cast<int64_t>(tier.codec_bits));
  section.insert("codec_energy", tier.codec_energy);
  if (tier.tenant_codecs.empty()) return;
  toml::table codecs;
  for (const auto& [tenant, choice] : tier.tenant_codecs) {
    codecs.insert(tenant, toml::table{{"codec", choice.codec},
                                      {"group_size", static_cast<int64_t>(choice.group_size)},
                                      {"bits", static_cast<int64_t>(choice.bits)},
                                      {"energy", choice.energy}});
  }
  section.insert("tenant_codecs", codecs);
}

absl::Status ApplyTable(const toml::table& root, DaemonConfig& c) {
  return ForEachTomlField(root, [&c](std::string_view section, std::string_view key,
                                     const std::string& name, const toml::node& value) {
    absl::Status s = UnknownTomlKey(name);
    if (section == "host") {
      if (key == "capacity_bytes") s = ReadTomlBytes(value, name, c.host.capacity_bytes);
      if (key == "page_bytes") {
        uint64_t page = 0;
        s = ReadTomlBytes(value, name, page);
        if (s.ok() && page > std::numeric_limits<uint32_t>::max()) {
          s = Bad("config: host.page_bytes must be below 4 GiB");
        }
        c.host.page_bytes = static_cast<uint32_t>(page);
      }
      if (key == "use_hugepages") s = ReadTomlBool(value, name, c.host.use_hugepages);
      if (key == "prefault") s = ReadTomlBool(value, name, c.host.prefault);
      if (key == "background_prefault") {
        s = ReadTomlBool(value, name, c.host.background_prefault);
      }
      if (key == "hard_pin_quota_bytes") {
        uint64_t quota = 0;
        s = ReadTomlBytes(value, name, quota);
        c.host.hard_pin_quota_bytes = quota;
      }
      if (key == "lease_ms") s = ReadTomlUint(value, name, c.host.lease_ms);
      if (key == "verify_every_n_loads") s = ReadTomlUint(value, name, c.host.verify_every_n_loads);
      if (key == "policy") s = ReadTomlString(value, name, c.host.policy);
      if (key == "tenant_quotas") s = ReadTenantQuotas(value, name, c.host.tenant_quotas);
      if (std::optional<absl::Status> read = ReadCodecKey(key, name, value, c.host)) s = *read;
      if (key == "codec_threads") s = ReadTomlUint(value, name, c.host.codec_threads);
    } else if (section == "disk") {
      if (key == "directory") s = ReadTomlString(value, name, c.disk.directory);
      if (key == "capacity_bytes") s = ReadTomlBytes(value, name, c.disk.capacity_bytes);
      if (key == "segment_bytes") s = ReadTomlBytes(value, name, c.disk.segment_bytes);
      if (key == "demotion_queue_bytes") {
        s = ReadTomlBytes(value, name, c.disk.demotion_queue_bytes);
      }
      if (key == "prefetch_queue_chunks")
        s = ReadTomlUint(value, name, c.disk.prefetch_queue_chunks);
      if (key == "write_through") s = ReadTomlBool(value, name, c.disk.write_through);
      if (std::optional<absl::Status> read = ReadCodecKey(key, name, value, c.disk)) s = *read;
      if (key == "codec_threads") s = ReadTomlUint(value, name, c.disk.codec_threads);
    } else if (section == "device_pool") {
      if (key == "bytes_per_layout") {
        s = ReadTomlBytes(value, name, c.device_pool.bytes_per_layout);
      }
      if (key == "block_tokens") s = ReadTomlUint(value, name, c.device_pool.block_tokens);
      if (key == "backend") s = ReadTomlString(value, name, c.device_pool.backend);
      if (key == "allow_host_fallback") {
        s = ReadTomlBool(value, name, c.device_pool.allow_host_fallback);
      }
      if (key == "device") s = ReadTomlUint(value, name, c.device_pool.device);
      if (key == "demote_ahead") s = ReadTomlBool(value, name, c.device_pool.demote_ahead);
    } else if (section == "engine") {
      if (key == "socket_path") s = ReadTomlString(value, name, c.engine.socket_path);
      if (key == "max_sessions") s = ReadTomlUint(value, name, c.engine.max_sessions);
      if (key == "allowed_uids") {
        const toml::array* array = value.as_array();
        s = array ? absl::OkStatus() : Bad("config: engine.allowed_uids must be an array");
        if (array) c.engine.allowed_uids.clear();
        for (size_t i = 0; s.ok() && array && i < array->size(); ++i) {
          uint32_t uid = 0;
          s = ReadTomlUint((*array)[i], name, uid);
          c.engine.allowed_uids.push_back(uid);
        }
      }
    } else if (section == "control") {
      if (key == "listen_address") s = ReadTomlString(value, name, c.control.listen_address);
      if (key == "unix_socket_path") s = ReadTomlString(value, name, c.control.unix_socket_path);
      if (key == "tls_cert_path") s = ReadTomlString(value, name, c.control.tls_cert_path);
      if (key == "tls_key_path") s = ReadTomlString(value, name, c.control.tls_key_path);
      if (key == "auth_token_file") s = ReadTomlString(value, name, c.control.auth_token_file);
      if (key == "event_ring_capacity") {
        s = ReadTomlUint(value, name, c.control.event_ring_capacity);
      }
    } else if (section == "keys") {
      if (key == "hash_algorithm") s = ReadTomlString(value, name, c.keys.hash_algorithm);
      if (key == "seed") s = ReadTomlString(value, name, c.keys.seed);
    } else if (section == "log") {
      if (key == "level") s = ReadTomlString(value, name, c.log.level);
    } else if (section == "events") {
      if (key == "zmq_endpoint") s = ReadTomlString(value, name, c.events.zmq_endpoint);
      if (key == "zmq_topic") s = ReadTomlString(value, name, c.events.zmq_topic);
    } else if (section == "metrics") {
      if (key == "listen_address") s = ReadTomlString(value, name, c.metrics.listen_address);
    } else if (section == "remote") {
      if (key == "listen_address") s = ReadTomlString(value, name, c.remote.listen_address);
      if (key == "peers") s = ReadTomlStrings(value, name, c.remote.peers);
      if (key == "cluster_token_file") {
        s = ReadTomlString(value, name, c.remote.cluster_token_file);
      }
      if (key == "node_id") s = ReadTomlString(value, name, c.remote.node_id);
      if (key == "lookup_budget_us") s = ReadTomlUint(value, name, c.remote.lookup_budget_us);
      if (key == "fetch_timeout_ms") s = ReadTomlUint(value, name, c.remote.fetch_timeout_ms);
      if (key == "pd_lookup_budget_ms") {
        s = ReadTomlUint(value, name, c.remote.pd_lookup_budget_ms);
      }
      if (key == "pd_deadline_ms") s = ReadTomlUint(value, name, c.remote.pd_deadline_ms);
      if (key == "read_window_bytes") {
        s = ReadTomlBytes(value, name, c.remote.read_window_bytes);
      }
      if (key == "transports") s = ReadTomlString(value, name, c.remote.transports);
      if (key == "net_devices") s = ReadTomlString(value, name, c.remote.net_devices);
    } else if (section == "cluster") {
      if (key == "controllers") s = ReadTomlStrings(value, name, c.cluster.controllers);
      if (key == "instance_id") s = ReadTomlString(value, name, c.cluster.instance_id);
      if (key == "advertise_address") {
        s = ReadTomlString(value, name, c.cluster.advertise_address);
      }
      if (key == "token_file") s = ReadTomlString(value, name, c.cluster.token_file);
      if (key == "tls_ca_path") s = ReadTomlString(value, name, c.cluster.tls_ca_path);
    } else if (section == "daemon") {
      if (key == "drain_timeout_ms") s = ReadTomlUint(value, name, c.drain_timeout_ms);
    } else {
      s = UnknownTomlSection(section);
    }
    return s;
  });
}

}  // namespace

ConfigEnvironment ConfigEnvironment::FromProcess() {
  ConfigEnvironment env;
  const long pages = ::sysconf(_SC_PHYS_PAGES);
  const long page_size = ::sysconf(_SC_PAGESIZE);
  if (pages > 0 && page_size > 0) {
    env.physical_memory_bytes = static_cast<uint64_t>(pages) * static_cast<uint64_t>(page_size);
  }
  if (const char* dir = std::getenv("XDG_RUNTIME_DIR"); dir != nullptr) env.runtime_dir = dir;
  return env;
}

DaemonConfig DefaultConfig(const ConfigEnvironment& env) {
  DaemonConfig config;
  const uint64_t quarter = env.physical_memory_bytes / 4;
  const uint64_t capacity =
      std::min(quarter == 0 ? kDefaultMaxHostBytes : quarter, kDefaultMaxHostBytes);
  config.host.capacity_bytes = capacity / config.host.page_bytes * config.host.page_bytes;
  config.engine.socket_path = SocketDir(env) + "/engine.sock";
  config.control.unix_socket_path = SocketDir(env) + "/control.sock";
  return config;
}

absl::StatusOr<DaemonConfig> ApplyToml(std::string_view toml_text, DaemonConfig base) {
  STRATA_ASSIGN_OR_RETURN(const toml::table root, ParseTomlText(toml_text));
  STRATA_RETURN_IF_ERROR(ApplyTable(root, base));
  return base;
}

absl::Status ValidateConfig(const DaemonConfig& c) {
  if (c.host.page_bytes == 0 || c.host.page_bytes % 4096 != 0) {
    return Bad(
        fmt::format("config: host.page_bytes={} must be a multiple of 4096", c.host.page_bytes));
  }
  if (c.host.capacity_bytes == 0 || c.host.capacity_bytes % c.host.page_bytes != 0) {
    return Bad(
        fmt::format("config: host.capacity_bytes={} must be a positive multiple of "
                    "host.page_bytes={}",
                    c.host.capacity_bytes, c.host.page_bytes));
  }
  if (c.host.hard_pin_quota_bytes.value_or(0) > c.host.capacity_bytes) {
    return Bad("config: host.hard_pin_quota_bytes exceeds host.capacity_bytes");
  }
  if (absl::Status s =
          storage::HostTier::CheckTenantQuotas(c.host.tenant_quotas, c.host.capacity_bytes);
      !s.ok()) {
    return Bad(fmt::format("config: host.tenant_quotas: {}", s.message()));
  }
  if (!c.disk.directory.empty() && (c.disk.segment_bytes == 0 || c.disk.segment_bytes % 4096 != 0 ||
                                    c.disk.capacity_bytes / c.disk.segment_bytes < 3)) {
    return Bad(
        fmt::format("config: disk.segment_bytes={} must be a positive multiple of 4096 and "
                    "disk.capacity_bytes={} at least 3 segments",
                    c.disk.segment_bytes, c.disk.capacity_bytes));
  }
  if (c.disk.write_through && c.disk.directory.empty()) {
    return Bad("config: disk.write_through needs a disk tier (disk.directory)");
  }
  STRATA_RETURN_IF_ERROR(CheckTierCodecs("host", c.host));
  STRATA_RETURN_IF_ERROR(CheckTierCodecs("disk", c.disk));
  if (!c.disk.codec.empty() && c.disk.directory.empty()) {
    return Bad("config: disk.codec needs a disk tier (disk.directory)");
  }
  if (!c.disk.tenant_codecs.empty() && c.disk.directory.empty()) {
    return Bad(fmt::format("config: disk.tenant_codecs.'{}' needs a disk tier (disk.directory)",
                           c.disk.tenant_codecs.begin()->first));
  }
  if (c.disk.prefetch_queue_chunks == 0) {
    return Bad("config: disk.prefetch_queue_chunks must be at least 1");
  }
  if (c.device_pool.block_tokens == 0 || c.device_pool.block_tokens > 65536) {
    return Bad("config: device_pool.block_tokens must lie in 1..65536");
  }
  if (absl::StatusOr<storage::DeviceBackend> backend =
          storage::ParseDeviceBackend(c.device_pool.backend);
      !backend.ok()) {
    return Bad(fmt::format("config: device_pool.backend: {}", backend.status().message()));
  }
  if (c.device_pool.device > 1024) return Bad("config: device_pool.device must lie in 0..1024");
  if (c.host.lease_ms == 0) return Bad("config: host.lease_ms must be positive");
  if (c.host.verify_every_n_loads == 0) {
    return Bad("config: host.verify_every_n_loads must be at least 1");
  }
  if (c.engine.socket_path.empty()) return Bad("config: engine.socket_path is empty");
  if (c.engine.max_sessions == 0) return Bad("config: engine.max_sessions must be positive");
  if (c.control.tls_cert_path.empty() != c.control.tls_key_path.empty()) {
    return Bad("config: control.tls_cert_path and control.tls_key_path go together");
  }
  if (c.control.event_ring_capacity == 0) {
    return Bad("config: control.event_ring_capacity must be at least 1");
  }
  if (absl::StatusOr<HashAlgorithm> a = ParseHashAlgorithm(c.keys.hash_algorithm); !a.ok()) {
    return Bad(fmt::format("config: keys.hash_algorithm: {}", a.status().message()));
  }
  if (!c.remote.listen_address.empty() && c.remote.cluster_token_file.empty()) {
    return Bad("config: remote.listen_address needs remote.cluster_token_file (peers share it)");
  }
  if (c.remote.listen_address.empty() && !c.remote.peers.empty()) {
    return Bad("config: remote.peers needs remote.listen_address (the remote tier is off)");
  }
  if (c.remote.lookup_budget_us == 0 || c.remote.lookup_budget_us > 1'000'000) {
    return Bad("config: remote.lookup_budget_us must lie in 1..1000000");
  }
  if (c.remote.fetch_timeout_ms == 0)
    return Bad("config: remote.fetch_timeout_ms must be positive");
  if (c.remote.pd_lookup_budget_ms == 0 || c.remote.pd_lookup_budget_ms > 60'000) {
    return Bad("config: remote.pd_lookup_budget_ms must lie in 1..60000");
  }
  if (c.remote.pd_deadline_ms == 0 || c.remote.pd_deadline_ms > 600'000) {
    return Bad("config: remote.pd_deadline_ms must lie in 1..600000");
  }
  if (c.remote.read_window_bytes < (64 << 10) || c.remote.read_window_bytes > (uint64_t{1} << 30)) {
    return Bad("config: remote.read_window_bytes must lie in 64 KiB..1 GiB");
  }
  if (!c.cluster.controllers.empty() && c.control.listen_address.empty() &&
      c.cluster.advertise_address.empty()) {
    return Bad(
        "config: cluster.controllers needs a control API the controller can dial "
        "(control.listen_address or cluster.advertise_address)");
  }
  for (const std::string& controller : c.cluster.controllers) {
    if (controller.empty()) return Bad("config: cluster.controllers holds an empty address");
  }
  STRATA_RETURN_IF_ERROR(CheckLogLevel("log.level", c.log.level));
  return absl::OkStatus();
}

std::string ConfigToToml(const DaemonConfig& c) {
  toml::array uids;
  for (uint32_t uid : c.engine.allowed_uids) uids.push_back(static_cast<int64_t>(uid));
  toml::array peers;
  for (const std::string& peer : c.remote.peers) peers.push_back(peer);
  toml::array controllers;
  for (const std::string& controller : c.cluster.controllers) controllers.push_back(controller);
  toml::table root{
      {"host",
       toml::table{{"capacity_bytes", static_cast<int64_t>(c.host.capacity_bytes)},
                   {"page_bytes", static_cast<int64_t>(c.host.page_bytes)},
                   {"use_hugepages", c.host.use_hugepages},
                   {"prefault", c.host.prefault},
                   {"background_prefault", c.host.background_prefault},
                   {"lease_ms", static_cast<int64_t>(c.host.lease_ms)},
                   {"verify_every_n_loads", static_cast<int64_t>(c.host.verify_every_n_loads)},
                   {"policy", c.host.policy},
                   {"codec_threads", static_cast<int64_t>(c.host.codec_threads)}}},
      {"disk",
       toml::table{{"directory", c.disk.directory},
                   {"capacity_bytes", static_cast<int64_t>(c.disk.capacity_bytes)},
                   {"segment_bytes", static_cast<int64_t>(c.disk.segment_bytes)},
                   {"demotion_queue_bytes", static_cast<int64_t>(c.disk.demotion_queue_bytes)},
                   {"prefetch_queue_chunks", static_cast<int64_t>(c.disk.prefetch_queue_chunks)},
                   {"write_through", c.disk.write_through},
                   {"codec_threads", static_cast<int64_t>(c.disk.codec_threads)}}},
      {"device_pool",
       toml::table{{"bytes_per_layout", static_cast<int64_t>(c.device_pool.bytes_per_layout)},
                   {"block_tokens", static_cast<int64_t>(c.device_pool.block_tokens)},
                   {"backend", c.device_pool.backend},
                   {"allow_host_fallback", c.device_pool.allow_host_fallback},
                   {"device", static_cast<int64_t>(c.device_pool.device)},
                   {"demote_ahead", c.device_pool.demote_ahead}}},
      {"engine", toml::table{{"socket_path", c.engine.socket_path},
                             {"max_sessions", static_cast<int64_t>(c.engine.max_sessions)},
                             {"allowed_uids", uids}}},
      {"control",
       toml::table{{"listen_address", c.control.listen_address},
                   {"unix_socket_path", c.control.unix_socket_path},
                   {"event_ring_capacity", static_cast<int64_t>(c.control.event_ring_capacity)},
                   {"tls_cert_path", c.control.tls_cert_path},
                   {"tls_key_path", c.control.tls_key_path},
                   {"auth_token_file", c.control.auth_token_file}}},
      {"keys", toml::table{{"hash_algorithm", c.keys.hash_algorithm}, {"seed", c.keys.seed}}},
      {"log", toml::table{{"level", c.log.level}}},
      {"events",
       toml::table{{"zmq_endpoint", c.events.zmq_endpoint}, {"zmq_topic", c.events.zmq_topic}}},
      {"metrics", toml::table{{"listen_address", c.metrics.listen_address}}},
      {"remote",
       toml::table{{"listen_address", c.remote.listen_address},
                   {"peers", peers},
                   {"cluster_token_file", c.remote.cluster_token_file},
                   {"node_id", c.remote.node_id},
                   {"lookup_budget_us", static_cast<int64_t>(c.remote.lookup_budget_us)},
                   {"pd_lookup_budget_ms", static_cast<int64_t>(c.remote.pd_lookup_budget_ms)},
                   {"pd_deadline_ms", static_cast<int64_t>(c.remote.pd_deadline_ms)},
                   {"read_window_bytes", static_cast<int64_t>(c.remote.read_window_bytes)},
                   {"fetch_timeout_ms", static_cast<int64_t>(c.remote.fetch_timeout_ms)},
                   {"transports", c.remote.transports},
                   {"net_devices", c.remote.net_devices}}},
      {"cluster", toml::table{{"controllers", controllers},
                              {"instance_id", c.cluster.instance_id},
                              {"advertise_address", c.cluster.advertise_address},
                              {"token_file", c.cluster.token_file},
                              {"tls_ca_path", c.cluster.tls_ca_path}}},
      {"daemon", toml::table{{"drain_timeout_ms", static_cast<int64_t>(c.drain_timeout_ms)}}},
  };
  if (!c.host.tenant_quotas.empty()) {
    toml::table quotas;
    for (const auto& [tenant, bytes] : c.host.tenant_quotas) {
      quotas.insert(tenant, static_cast<int64_t>(bytes));
    }
    root["host"].as_table()->insert("tenant_quotas", quotas);
  }
  InsertCodecKeys(c.host, *root["host"].as_table());
  InsertCodecKeys(c.disk, *root["disk"].as_table());
  if (c.host.hard_pin_quota_bytes.has_value()) {
    root["host"].as_table()->insert("hard_pin_quota_bytes",
                                    static_cast<int64_t>(*c.host.hard_pin_quota_bytes));
  }
  std::ostringstream out;
  out << root << "\n";
  return out.str();
}

absl::StatusOr<std::optional<DaemonConfig>> ParseCommandLine(int argc, char** argv,
                                                             const ConfigEnvironment& env) {
  CLI::App app{"stratad: the Strata KV-cache daemon"};
  std::string config_path;
  bool print_config = false;
  std::optional<std::string> host_capacity, engine_socket, listen, control_socket, log_level,
      hash_algorithm, seed, policy, disk_directory, disk_capacity, metrics_listen, tls_cert,
      tls_key, auth_token_file, kv_events_endpoint, remote_listen, remote_peers, cluster_token_file,
      controllers, instance_id;
  app.add_option("-c,--config", config_path, "TOML configuration file");
  app.add_flag("--print-config", print_config, "print the effective configuration and exit");
  app.add_option("--host-capacity", host_capacity, "host tier size, e.g. 8GiB");
  app.add_option("--engine-socket", engine_socket, "engine session socket path");
  app.add_option("--listen", listen, "gRPC TCP address (\"\" disables)");
  app.add_option("--control-socket", control_socket, "gRPC Unix socket path (\"\" disables)");
  app.add_option("--log-level", log_level, "trace|debug|info|warn|error|critical|off");
  app.add_option("--hash-algorithm", hash_algorithm, "xxh3_128|sha256_cbor");
  app.add_option("--seed", seed, "key protocol seed");
  app.add_option("--policy", policy, "host tier eviction policy");
  app.add_option("--disk-dir", disk_directory, "disk tier directory (\"\" disables)");
  app.add_option("--disk-capacity", disk_capacity, "disk tier size, e.g. 100GiB");
  app.add_option("--tls-cert", tls_cert, "PEM certificate for TLS on the gRPC TCP port");
  app.add_option("--tls-key", tls_key, "PEM private key of --tls-cert");
  app.add_option("--auth-token-file", auth_token_file,
                 "file holding the bearer token gRPC TCP callers must present");
  app.add_option("--kv-events-endpoint", kv_events_endpoint,
                 "publish vLLM-format KV events on this ZMQ PUB endpoint (\"\" disables)");
  app.add_option("--metrics-listen", metrics_listen,
                 "Prometheus /metrics address (default 127.0.0.1:9464; \"\" disables)");
  app.add_option("--remote-listen", remote_listen,
                 "UCX address peer daemons reach this one on, host:port (\"\" disables)");
  app.add_option("--remote-peers", remote_peers, "peer daemons to dial, host:port,host:port");
  app.add_option("--cluster-token-file", cluster_token_file,
                 "file holding the token every peer daemon shares");
  app.add_option("--controllers", controllers,
                 "strata-controller addresses to register with, host:port,host:port");
  app.add_option("--instance-id", instance_id, "this daemon's id in the cluster");
  bool no_metrics = false;
  app.add_flag("--no-metrics", no_metrics, "Serve no /metrics endpoint");
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    std::cout << app.help();
    return std::optional<DaemonConfig>();
  } catch (const CLI::ParseError& e) {
    return Bad(fmt::format("command line: {}", e.what()));
  }

  DaemonConfig config = DefaultConfig(env);
  if (!config_path.empty()) {
    STRATA_ASSIGN_OR_RETURN(const std::string text, ReadConfigFile(config_path));
    STRATA_ASSIGN_OR_RETURN(config, ApplyToml(text, std::move(config)));
  }
  if (host_capacity) {
    STRATA_ASSIGN_OR_RETURN(config.host.capacity_bytes, ParseByteSize(*host_capacity));
  }
  if (engine_socket) config.engine.socket_path = *engine_socket;
  if (listen) config.control.listen_address = *listen;
  if (control_socket) config.control.unix_socket_path = *control_socket;
  if (log_level) config.log.level = *log_level;
  if (hash_algorithm) config.keys.hash_algorithm = *hash_algorithm;
  if (seed) config.keys.seed = *seed;
  if (policy) config.host.policy = *policy;
  if (disk_directory) config.disk.directory = *disk_directory;
  if (disk_capacity) {
    STRATA_ASSIGN_OR_RETURN(config.disk.capacity_bytes, ParseByteSize(*disk_capacity));
  }
  if (metrics_listen) config.metrics.listen_address = *metrics_listen;
  if (no_metrics) config.metrics.listen_address.clear();
  if (kv_events_endpoint) config.events.zmq_endpoint = *kv_events_endpoint;
  if (tls_cert) config.control.tls_cert_path = *tls_cert;
  if (tls_key) config.control.tls_key_path = *tls_key;
  if (auth_token_file) config.control.auth_token_file = *auth_token_file;
  if (remote_listen) config.remote.listen_address = *remote_listen;
  if (remote_peers) config.remote.peers = SplitList(*remote_peers);
  if (controllers) config.cluster.controllers = SplitList(*controllers);
  if (instance_id) config.cluster.instance_id = *instance_id;
  if (cluster_token_file) config.remote.cluster_token_file = *cluster_token_file;
  STRATA_RETURN_IF_ERROR(ValidateConfig(config));
  if (print_config) {
    std::cout << ConfigToToml(config);
    return std::optional<DaemonConfig>();
  }
  return std::optional<DaemonConfig>(std::move(config));
}

}  // namespace strata::daemon
