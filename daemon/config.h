// DaemonConfig is everything stratad can be told: an embedded default that works with no file,
// overridden by a TOML file, overridden by command-line flags. A plain value type.
//
// TOML (every key optional; sizes are integers of bytes or strings such as "8GiB", "512MiB";
// docs/operations.md gives each key's default and effect, and docs_test checks it against this
// parser):
//   [host]    capacity_bytes, page_bytes, use_hugepages, prefault, background_prefault,
//             hard_pin_quota_bytes, lease_ms, verify_every_n_loads, policy ("adaptive" default,
//             "lru", "arc", "s3fifo", "prefix-lru") codec, codec_group_size, codec_bits,
//             codec_energy (as [disk]'s: the chunks committed to the host tier are compressed in
//             place in the background, and decoded by the engines' connectors as they load them, or
//             back by the daemon before a load for a connector that does not decode; "" (the
//             default) keeps them as they are), codec_threads (threads recoding host chunks for
//             Compress / Decompress; default: the cores, up to 4; 0: the calling thread alone)
//   [host.tenant_quotas]  tenant = size (one key per tenant with a quota)
//   [host.tenant_codecs]  as [disk.tenant_codecs], for [host] codec
//   [disk]    directory ("" disables the disk tier), capacity_bytes, segment_bytes,
//             demotion_queue_bytes (evicted chunks staged in memory for the background
//             writer, default 256MiB; 0 writes them on the evicting thread),
//             prefetch_queue_chunks (chunks
//             an engine's Prefetch may queue for background promotion; >= 1), write_through,
//             codec (chunks written to disk are encoded: "int8", "kivi8", "kivi4", "kivi2",
//             "cachegen", "xkv"; "" (the default) stores them as they are), codec_group_size,
//             codec_bits, codec_energy (the codec's parameters, 0: its defaults;
//             storage/codec/codec.h), codec_threads (threads decoding encoded chunks as they
//             are promoted, and as many recoding chunks for Compress / Decompress; default:
//             the cores, up to 4; 0: the calling thread alone)
//   [disk.tenant_codecs]  tenant = "codec" (its defaults; "" : as they are), or tenant = { codec
//             = "kivi4", group_size = 64, bits = 0, energy = 0 }: the chunks the host tier
//             stored under that tenant are written to disk so, in place of [disk] codec
//   [device_pool]  bytes_per_layout (device memory of the T0 pool granted to the engines of each
//             layout at their handshake; 0 (the default): none), block_tokens (a page's tokens:
//             the engines' KV block size, default 16), backend ("auto" (default), "cuda",
//             "host"), allow_host_fallback ("auto" without a usable GPU pools host memory
//             instead of failing start-up; default false), device (the CUDA device, default 0),
//             demote_ahead (copy chunks that become evictable into the host tier on a thread,
//             ahead of their eviction; default true)
//   [engine]  socket_path, max_sessions, allowed_uids (array of ints)
//   [control] listen_address ("" disables TCP), unix_socket_path ("" disables it),
//             event_ring_capacity (recent KV events kept for WatchEvents resumption; >= 1),
//             tls_cert_path + tls_key_path (PEM; TLS on the TCP port, both or neither),
//             auth_token_file (a file holding the bearer token TCP callers must present;
//             "" accepts every TCP caller; the Unix socket is guarded by file permissions)
//   [keys]    hash_algorithm ("xxh3_128" | "sha256_cbor"), seed
//   [log]     level ("trace" .. "critical", "off")
//   [events]  zmq_endpoint (vLLM-format KV events over ZMQ PUB, e.g. "tcp://127.0.0.1:5557";
//             "" disables), zmq_topic
//   [metrics] listen_address (Prometheus /metrics; default "127.0.0.1:9464"; "" disables it)
//   [remote]  listen_address (where peer daemons reach this one over UCX, "host:port"; "" (the
//             default) disables the remote tier), peers (array of "host:port" to dial),
//             cluster_token_file (a file holding the token every peer shares; required with a
//             listen_address), node_id ("" : hostname:port), lookup_budget_us (how long an
//             engine's Lookup waits for peers' answers, default 1000),
//             pd_lookup_budget_ms (the same for a decoder's Lookup naming the node that
//             prefilled its KV, default 200), pd_deadline_ms (how long a prefill's layer stream
//             to its decoder's daemon may take, from the first layer to the last chunk
//             committed there, default 30000), read_window_bytes (the most bytes of reads
//             asked of one peer and not yet landed over active messages; later ones wait, so
//             that a large transfer does not queue ahead of the link's health checks; default
//             32 MiB), fetch_timeout_ms (default 5000), transports
//             (UCX_TLS, "" UCX's default), net_devices (UCX_NET_DEVICES, "" UCX's default)
//   [cluster] controllers (array of strata-controller "host:port", tried in order until one
//             takes the registration; empty (the default): no cluster), instance_id ("" : the
//             remote tier's node id, else "<hostname>:<control port>"), advertise_address (the
//             control API address the controller dials; "" : control.listen_address with its
//             bound port, a wildcard host replaced by the hostname), token_file (the bearer
//             token the controller requires), tls_ca_path (the controller's TLS root; ""
//             plaintext)
//   [daemon]  drain_timeout_ms
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "storage/policy/eviction_policy.h"
#include "storage/tiered/task_pool.h"

namespace strata::daemon {

// Where /metrics is served unless configured otherwise.
inline constexpr std::string_view kDefaultMetricsAddress = "127.0.0.1:9464";

struct DaemonConfig {
  // A tenant's own codec ("" : kept as they are) and parameters, in place of its tier's codec for
  // the chunks stored under it (an engine request's tenant salt): e.g. one tenant's KV kept
  // exact while the others' is compressed.
  struct TenantCodec {
    std::string codec;
    uint32_t group_size = 0;
    uint32_t bits = 0;
    double energy = 0;
  };
  struct Host {
    uint64_t capacity_bytes = 0;
    uint32_t page_bytes = 2u << 20;
    bool use_hugepages = false;
    bool prefault = false;
    // Without prefault: allocate the arena's pages on a background thread from start-up (the
    // daemon is ready at once; stores into it stop paying page faults within seconds), charged
    // to the daemon. Off: pages are allocated on first touch, charged to whoever touches them.
    bool background_prefault = true;
    // Unset: half of capacity_bytes.
    std::optional<uint64_t> hard_pin_quota_bytes;
    uint32_t lease_ms = 30'000;
    uint32_t verify_every_n_loads = 1;
    std::string policy = std::string(storage::kDefaultEvictionPolicy);
    // Tenant (an engine request's tenant salt) -> the bytes of the tier it may keep once the
    // tier is full (TenantQuotaPolicy). Empty: no quotas.
    std::map<std::string, uint64_t> tenant_quotas;
    // The codec the chunks committed here are compressed with in the background, in place
    // (storage/tiered/host_compressor.h); "": kept as they are. The same keys as [disk]'s.
    std::string codec;
    uint32_t codec_group_size = 0;
    uint32_t codec_bits = 0;
    double codec_energy = 0;
    std::map<std::string, TenantCodec> tenant_codecs;
    // Threads recoding host chunks for Compress / Decompress (with a disk tier, the larger of
    // this and [disk] codec_threads recode chunks of either tier); 0: the calling thread alone.
    uint32_t codec_threads = storage::CoresUpTo(4);
  } host;
  struct Disk {
    // Holds the segment files and the index; "" disables the disk tier.
    std::string directory;
    // Most bytes the segment files may take; at least 3 segments.
    uint64_t capacity_bytes = 0;
    uint64_t segment_bytes = 256ull << 20;
    // Memory for evicted chunks waiting for their disk write (storage/tiered/demoter.h): eviction
    // costs a memcpy instead of a disk write on the engine's session thread. Staged chunks stay
    // visible: lookups count them and loads promote them from memory. A crash loses the staged
    // chunks (cached copies only). 0 demotes on the evicting thread.
    uint64_t demotion_queue_bytes = 256ull << 20;
    // Most chunks queued for background promotion by engines' Prefetch requests
    // (storage/tiered/promoter.h); a Prefetch past it is RESOURCE_EXHAUSTED.
    uint32_t prefetch_queue_chunks = 1024;
    // Writes every chunk committed in the host tier to disk as well, in the background
    // (storage/tiered/write_through.h): chunks survive a restart and their eviction writes
    // nothing. Costs disk bandwidth for chunks that might never be evicted. Off: write-back on
    // eviction only.
    bool write_through = false;
    // The codec chunks written to disk are encoded with (storage/tiered/disk_lower_tier.h): disk
    // holds more chunks and promotions read fewer bytes; a lossy codec's chunks come back within
    // its error bound. "": stored as they are.
    std::string codec;
    uint32_t codec_group_size = 0;
    uint32_t codec_bits = 0;
    double codec_energy = 0;
    // Threads that decode encoded chunks as they are promoted, while the next ones are read, and
    // as many that recode chunks for Compress and Decompress (default: the machine's cores, up to
    // 4; 0: the calling thread alone).
    uint32_t codec_threads = storage::CoresUpTo(4);
    // Tenants whose chunks are written to disk with their own codec (TenantCodec).
    std::map<std::string, TenantCodec> tenant_codecs;
  } disk;
  struct DevicePool {
    // Device memory for the T0 pool of each layout engines handshake with (one per model and
    // tensor-parallel rank), which engines map and read in place (storage/device/device_pool.h):
    // 0 (the default) has no device pool.
    uint64_t bytes_per_layout = 0;
    // Tokens of one page: the engines' KV block size; it must divide their chunk_tokens.
    uint32_t block_tokens = 16;
    // "auto" (CUDA when this build has it and a GPU is visible), "cuda" or "host" (memfd memory
    // standing in for a GPU's). A pool that "auto" cannot give a GPU fails start-up, saying why,
    // unless allow_host_fallback: a GPU node whose devices the daemon cannot reach (a unit or a
    // pod without them) must not serve engines a host-memory pool they did not ask for.
    std::string backend = "auto";
    // "auto" without a usable GPU pools host memory (with a warning) instead of failing.
    bool allow_host_fallback = false;
    uint32_t device = 0;  // the CUDA device
    // Chunks that become evictable are copied into the host tier on a thread, so their eviction
    // copies nothing under the pool's lock (storage/tiered/device_pool_tiering.h); false: they
    // are copied when evicted, by the request that evicts them.
    bool demote_ahead = true;
  } device_pool;
  struct Engine {
    std::string socket_path;
    uint32_t max_sessions = 256;
    // Peers allowed besides the daemon's own uid and root (SO_PEERCRED).
    std::vector<uint32_t> allowed_uids;
  } engine;
  struct Control {
    std::string listen_address = "127.0.0.1:50051";
    std::string unix_socket_path;
    uint32_t event_ring_capacity = 65536;
    std::string tls_cert_path;
    std::string tls_key_path;
    std::string auth_token_file;
  } control;
  struct Keys {
    std::string hash_algorithm = "xxh3_128";
    std::string seed = "0";
  } keys;
  struct Log {
    std::string level = "info";
  } log;
  struct Events {
    std::string zmq_endpoint;  // "" (the default): no ZMQ publisher
    std::string zmq_topic = "kv-events";
  } events;
  struct Metrics {
    // On by default, on localhost only, as engines serve their own /metrics; "" (or
    // --no-metrics) turns it off. When the default address is taken the daemon runs without
    // metrics and says so; an address set on purpose that cannot be bound fails the start.
    std::string listen_address{kDefaultMetricsAddress};
  } metrics;
  struct Remote {
    // "" (the default): no remote tier; this daemon neither serves peers nor asks them.
    std::string listen_address;
    std::vector<std::string> peers;
    std::string cluster_token_file;
    std::string node_id;
    uint32_t lookup_budget_us = 1000;
    // A disaggregated decode's lookup knows its KV is on a peer: it may wait longer for it.
    uint32_t pd_lookup_budget_ms = 200;
    uint32_t pd_deadline_ms = 30'000;
    uint64_t read_window_bytes = 32ull << 20;
    uint32_t fetch_timeout_ms = 5000;
    std::string transports;
    std::string net_devices;
  } remote;
  struct Cluster {
    std::vector<std::string> controllers;
    std::string instance_id;
    std::string advertise_address;
    std::string token_file;
    std::string tls_ca_path;
  } cluster;
  uint32_t drain_timeout_ms = 5'000;
};

// What the embedded default depends on, read from the process environment in one place.
struct ConfigEnvironment {
  uint64_t physical_memory_bytes = 0;
  std::string runtime_dir;  // $XDG_RUNTIME_DIR, or "" when unset
  static ConfigEnvironment FromProcess();
};

// The embedded default: host tier min(25% of RAM, 8 GiB) rounded down to whole pages; sockets
// under $XDG_RUNTIME_DIR/strata/ (or ./var/run/strata/); gRPC on 127.0.0.1:50051.
DaemonConfig DefaultConfig(const ConfigEnvironment& env);

// Applies a TOML document on top of `base`. kInvalidArgument naming the key (and the line for
// syntax errors) for malformed TOML, unknown keys, wrong types or bad sizes.
absl::StatusOr<DaemonConfig> ApplyToml(std::string_view toml_text, DaemonConfig base);

// Checks cross-field rules (capacity a multiple of page size, known hash algorithm, ...).
absl::Status ValidateConfig(const DaemonConfig& config);

// The config as a TOML document that ApplyToml reads back to the same config.
std::string ConfigToToml(const DaemonConfig& config);

// Parses stratad's command line: --config FILE, --print-config, and flags that override single
// keys (--host-capacity, --engine-socket, --listen, --control-socket, --log-level, ...).
// Returns the final validated config, or nullopt when the command line asked only for help or
// for the config to be printed (already written to stdout). kInvalidArgument for bad flags.
absl::StatusOr<std::optional<DaemonConfig>> ParseCommandLine(int argc, char** argv,
                                                             const ConfigEnvironment& env);

}  // namespace strata::daemon
