#include "daemon/metrics.h"

#include <netdb.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <exception>
#include <optional>
#include <string>
#include <thread>

#include "fmt/format.h"

namespace strata::daemon {
namespace {

using prometheus::ClientMetric;
using prometheus::MetricFamily;
using prometheus::MetricType;

ClientMetric Value(MetricType type, double value, std::vector<ClientMetric::Label> labels) {
  ClientMetric metric;
  metric.label = std::move(labels);
  if (type == MetricType::Counter) {
    metric.counter.value = value;
  } else {
    metric.gauge.value = value;
  }
  return metric;
}

// One family with a single series labelled {tier="host"}.
MetricFamily HostFamily(const char* name, const char* help, MetricType type, uint64_t value) {
  return {name, help, type, {Value(type, static_cast<double>(value), {{"tier", "host"}})}};
}

// Adds a series to family `name`, creating the family when it is not there yet (a family name
// appears once in an exposition).
void AddSeries(std::vector<MetricFamily>& families, const std::string& name,
               const std::string& help, MetricType type, uint64_t value,
               std::vector<ClientMetric::Label> labels) {
  for (MetricFamily& family : families) {
    if (family.name == name) {
      family.metric.push_back(Value(type, static_cast<double>(value), std::move(labels)));
      return;
    }
  }
  families.push_back({name, help, type, {Value(type, static_cast<double>(value), labels)}});
}

// The {tier="disk"} (or other lower tier) series beside the host tier's, and the tier's own
// read and write counters (strata_disk_reads_total, ...).
void AddLowerTierFamilies(std::vector<MetricFamily>& families, const storage::LowerTierStats& s) {
  const MetricType gauge = MetricType::Gauge;
  const MetricType counter = MetricType::Counter;
  const std::string name(storage::TierName(s.tier));
  const std::vector<ClientMetric::Label> tier = {{"tier", name}};
  AddSeries(families, "strata_tier_capacity_bytes", "Capacity of the tier.", gauge,
            s.capacity_bytes, tier);
  AddSeries(families, "strata_tier_used_bytes",
            "Bytes the tier holds (whole pages for the host tier).", gauge, s.used_bytes, tier);
  AddSeries(families, "strata_tier_chunks", "Committed chunks in the tier.", gauge, s.chunks, tier);
  AddSeries(families, "strata_tier_stored_bytes",
            "Payload bytes as the tier stores them (below the chunks' size where encoded).", gauge,
            s.stored_bytes, tier);
  AddSeries(families, "strata_tier_encoded_chunks",
            "Chunks the tier stores encoded by a codec ([disk] codec, Compress).", gauge,
            s.encoded_chunks, tier);
  AddSeries(families, "strata_tier_evictions_total", "", counter, s.evictions,
            {{"reason", "capacity"}, {"tier", name}});
  AddSeries(families, "strata_tier_evictions_total", "", counter, s.corrupt_evictions,
            {{"reason", "corrupt"}, {"tier", name}});
  AddSeries(families, "strata_checksum_failures_total",
            "Chunks whose payload checksum failed on a load.", counter, s.checksum_failures, tier);
  AddSeries(families, "strata_io_errors_total", "", counter, s.io_errors, tier);
  AddSeries(families, fmt::format("strata_{}_reads_total", name),
            fmt::format("Chunks read from the {} tier (promotions into the host tier).", name),
            counter, s.reads, {});
  AddSeries(families, fmt::format("strata_{}_read_bytes_total", name),
            fmt::format("Payload bytes read from the {} tier.", name), counter, s.read_bytes, {});
  AddSeries(families, fmt::format("strata_{}_writes_total", name),
            fmt::format("Chunks written to the {} tier.", name), counter, s.writes, {});
  AddSeries(families, fmt::format("strata_{}_written_bytes_total", name),
            fmt::format("Payload bytes written to the {} tier.", name), counter, s.written_bytes,
            {});
}

// The node's peers (strata_remote_peers{state}, strata_remote_bytes_total{peer,direction}) and
// what it served them.
void AddRemoteFamilies(std::vector<MetricFamily>& families,
                       const storage::remote::RemoteNode& node) {
  const MetricType gauge = MetricType::Gauge;
  const MetricType counter = MetricType::Counter;
  std::array<uint64_t, 4> by_state{};
  for (const storage::remote::PeerInfo& peer : node.Peers()) {
    ++by_state[static_cast<size_t>(peer.state)];
    const std::string name = peer.node_id.empty() ? peer.address : peer.node_id;
    const char* help =
        "Bytes moved with a peer: read from it, or served to it (its reads of this node's "
        "arena).";
    AddSeries(families, "strata_remote_bytes_total", help, counter, peer.bytes_read,
              {{"direction", "read"}, {"peer", name}});
    AddSeries(families, "strata_remote_bytes_total", help, counter, peer.bytes_served,
              {{"direction", "served"}, {"peer", name}});
  }
  for (storage::remote::PeerState state :
       {storage::remote::PeerState::kDialling, storage::remote::PeerState::kHandshaking,
        storage::remote::PeerState::kUp, storage::remote::PeerState::kDown}) {
    AddSeries(families, "strata_remote_peers", "Peer daemons, by link state.", gauge,
              by_state[static_cast<size_t>(state)],
              {{"state", std::string(storage::remote::PeerStateName(state))}});
  }
  const storage::remote::RemoteServerStats served = node.ServerStats();
  AddSeries(families, "strata_remote_served_queries_total",
            "Peers' questions about which chunks this node holds.", counter, served.queries, {});
  AddSeries(families, "strata_remote_served_chunks_total",
            "Chunks this node leased to peers for them to read.", counter, served.chunks_leased,
            {});
  AddSeries(families, "strata_remote_refused_total",
            "Peers' remote-tier messages refused (malformed, or over the lease limit).", counter,
            served.refused, {});
  const storage::remote::LayerStreamStats streams = node.StreamStats();
  const char* streams_help =
      "Layer streams peers opened to this node (disaggregated prefill), by how they ended when "
      "they did not commit: aborted by the pusher, expired (pd_deadline_ms), cut (the pusher's "
      "link went down).";
  AddSeries(families, "strata_remote_streams_total", streams_help, counter, streams.streams_opened,
            {{"event", "opened"}});
  AddSeries(families, "strata_remote_streams_total", streams_help, counter, streams.streams_aborted,
            {{"event", "aborted"}});
  AddSeries(families, "strata_remote_streams_total", streams_help, counter, streams.streams_expired,
            {{"event", "expired"}});
  AddSeries(families, "strata_remote_streams_total", streams_help, counter, streams.streams_cut,
            {{"event", "cut"}});
  const char* chunks_help =
      "Chunks peers streamed to this node layer by layer, by result (failed: a read failed, the "
      "checksum did not match, or the stream ended first: nothing was committed).";
  AddSeries(families, "strata_remote_stream_chunks_total", chunks_help, counter,
            streams.chunks_received, {{"result", "received"}});
  AddSeries(families, "strata_remote_stream_chunks_total", chunks_help, counter,
            streams.chunks_failed, {{"result", "failed"}});
  AddSeries(families, "strata_remote_stream_bytes_total",
            "Bytes read from pushers' arenas by layer streams.", counter, streams.bytes_received,
            {});
}

void AddMovementFamilies(std::vector<MetricFamily>& families, const storage::MovementStats& m) {
  const MetricType counter = MetricType::Counter;
  families.push_back(
      {"strata_demotions_total",
       "Chunks the host tier evicted to the tier below, by result (failed: the copy was lost).",
       counter,
       {Value(counter, static_cast<double>(m.demoted), {{"result", "written"}}),
        Value(counter, static_cast<double>(m.demotion_failures), {{"result", "failed"}})}});
  families.push_back(
      {"strata_prefetch_chunks_total",
       "Chunks engines' Prefetch requests queued for promotion, by outcome (skipped: in the "
       "host tier already, gone from below, or another writer's).",
       counter,
       {Value(counter, static_cast<double>(m.prefetch_promoted), {{"outcome", "promoted"}}),
        Value(counter, static_cast<double>(m.prefetch_skipped), {{"outcome", "skipped"}}),
        Value(counter, static_cast<double>(m.prefetch_failed), {{"outcome", "failed"}})}});
  families.push_back({"strata_async_loads_total",
                      "Engine loads that went on in the background past a host-tier miss (their "
                      "chunks came up from a lower tier).",
                      counter,
                      {Value(counter, static_cast<double>(m.async_loads), {})}});
  families.push_back({"strata_load_promoted_chunks_total",
                      "Chunks promoted from a lower tier for engines' loads.",
                      counter,
                      {Value(counter, static_cast<double>(m.load_promoted), {})}});
  families.push_back({"strata_peer_promoted_chunks_total",
                      "Chunks promoted from a lower tier because a peer asked for them.",
                      counter,
                      {Value(counter, static_cast<double>(m.peer_promoted), {})}});
  if (!m.write_through) return;
  families.push_back(
      {"strata_write_through_chunks_total",
       "Chunks committed in the host tier and written through to disk, by outcome (skipped: on "
       "disk already or gone from the host tier; dropped: the queue was full; cancelled: removed "
       "during the write).",
       counter,
       {Value(counter, static_cast<double>(m.write_through_written), {{"outcome", "written"}}),
        Value(counter, static_cast<double>(m.write_through_skipped), {{"outcome", "skipped"}}),
        Value(counter, static_cast<double>(m.write_through_dropped), {{"outcome", "dropped"}}),
        Value(counter, static_cast<double>(m.write_through_failed), {{"outcome", "failed"}}),
        Value(counter, static_cast<double>(m.write_through_cancelled),
              {{"outcome", "cancelled"}})}});
}

// strata_lookups_total{source,tenant}, strata_lookup_hit_tokens_total{source,tenant,tier} and
// strata_lookup_miss_tokens_total{source,tenant}: the engines' lookups and the control API's,
// per tenant (LookupAccounting bounds how many).
void AddLookupFamilies(std::vector<MetricFamily>& families, const LookupAccounting& lookups) {
  const MetricType counter = MetricType::Counter;
  for (const LookupSource source : {LookupSource::kEngine, LookupSource::kControl}) {
    const std::string source_name(LookupSourceName(source));
    for (const auto& [tenant, tally] : lookups.ByTenant(source)) {
      const std::vector<ClientMetric::Label> labels = {{"source", source_name}, {"tenant", tenant}};
      AddSeries(families, "strata_lookups_total",
                "Prefix lookups answered, by source (engine: engines' LookupChain; control: "
                "control-API Lookup) and tenant.",
                counter, tally.lookups, labels);
      AddSeries(families, "strata_lookup_miss_tokens_total", "Tokens of lookups found in no tier.",
                counter, tally.miss_tokens, labels);
      for (size_t t = 0; t < storage::kTierCount; ++t) {
        const auto tier = static_cast<storage::Tier>(t);
        // Every row has its host-tier series (0 included); other tiers once they hit.
        if (tally.hit_tokens[t] == 0 && tier != storage::Tier::kHost) continue;
        std::vector<ClientMetric::Label> tiered = labels;
        tiered.push_back({"tier", std::string(storage::TierName(tier))});
        AddSeries(families, "strata_lookup_hit_tokens_total",
                  "Tokens of lookups found cached, by the tier that held each chunk.", counter,
                  tally.hit_tokens[t], std::move(tiered));
      }
    }
  }
}

// Each device pool's pages by state, its references and its events, labelled by the layout's
// model and tensor-parallel rank.
void AddDevicePoolFamilies(std::vector<MetricFamily>& families, const storage::DevicePools& pools) {
  const MetricType gauge = MetricType::Gauge;
  const MetricType counter = MetricType::Counter;
  const char* pages_help =
      "Pages of the device pool (T0), by state: free, committed (of chunks in its index; "
      "referenced ones included), referenced, reserved, pending_free (removed, still read).";
  const char* events_help =
      "Device pool (T0) events: hit and miss (references asked for), commit, eviction, "
      "removed, admission_reject (a reservation free and evictable pages could not cover).";
  for (const storage::LayoutPoolStats& layout : pools.Stats()) {
    const storage::DevicePoolStats& s = layout.pool;
    auto labels = [&layout](std::string key, std::string value) {
      return std::vector<ClientMetric::Label>{{std::move(key), std::move(value)},
                                              {"model", layout.model_id},
                                              {"rank", std::to_string(layout.tp_rank)}};
    };
    AddSeries(families, "strata_device_pool_capacity_pages",
              "Pages of the device pool (T0); a page is one block of every layer.", gauge,
              s.capacity_pages, labels("page_bytes", std::to_string(s.page_bytes)));
    const std::pair<const char*, uint64_t> pages[] = {{"free", s.free_pages},
                                                      {"committed", s.committed_pages},
                                                      {"referenced", s.referenced_pages},
                                                      {"reserved", s.reserved_pages},
                                                      {"pending_free", s.pending_free_pages}};
    for (const auto& [state, count] : pages) {
      AddSeries(families, "strata_device_pool_pages", pages_help, gauge, count,
                labels("state", state));
    }
    AddSeries(families, "strata_device_pool_references",
              "Outstanding references to device pool chunks (requests reading them).", gauge,
              s.references, labels("kind", "request"));
    const std::pair<const char*, uint64_t> events[] = {
        {"hit", s.hits},        {"miss", s.misses},
        {"commit", s.commits},  {"eviction", s.evictions},
        {"removed", s.removed}, {"admission_reject", s.admission_rejects}};
    for (const auto& [event, count] : events) {
      AddSeries(families, "strata_device_pool_events_total", events_help, counter, count,
                labels("event", event));
    }
  }
}

// Chunks (and their bytes) the device pools demoted to the host tier and promoted from it.
void AddDevicePoolTieringFamilies(std::vector<MetricFamily>& families,
                                  const storage::DevicePoolTiering& tiering) {
  const storage::DevicePoolTieringStats s = tiering.stats();
  const char* chunks_help =
      "Device pool (T0) chunks moved to and from the host tier: demoted (copied to the host "
      "tier, at eviction or ahead of it), demoted_ahead (of demoted: by the demotion thread, off "
      "the pool's lock), demote_ahead_dropped (not queued for it: the queue was full), "
      "demote_skipped (the host tier held it already), demote_failed, promoted (a pool miss the "
      "host tier held), promoted_kept (of promoted: a thinned chunk's kept blocks), promote_failed "
      "(a bad checksum, a frame that did not decode or a failed copy).";
  const std::pair<const char*, uint64_t> events[] = {
      {"demoted", s.demoted},
      {"demoted_ahead", s.demoted_ahead},
      {"demote_ahead_dropped", s.demote_ahead_dropped},
      {"demote_skipped", s.demote_skipped},
      {"demote_failed", s.demote_failures},
      {"promoted", s.promoted},
      {"promoted_kept", s.promoted_kept},
      {"promote_failed", s.promote_failures}};
  for (const auto& [event, count] : events) {
    AddSeries(families, "strata_device_pool_tiering_total", chunks_help, MetricType::Counter, count,
              {{"event", event}});
  }
  const char* bytes_help = "Bytes the device pools demoted to the host tier and promoted from it.";
  AddSeries(families, "strata_device_pool_tiering_bytes_total", bytes_help, MetricType::Counter,
            s.demoted_bytes, {{"direction", "demoted"}});
  AddSeries(families, "strata_device_pool_tiering_bytes_total", bytes_help, MetricType::Counter,
            s.promoted_bytes, {{"direction", "promoted"}});
}

}  // namespace

prometheus::Histogram::BucketBoundaries LatencyBuckets() {
  return {1e-5, 2.5e-5, 5e-5, 1e-4, 2.5e-4, 5e-4, 1e-3, 2.5e-3, 5e-3, 1e-2, 2.5e-2, 0.1, 1.0};
}

prometheus::Histogram::BucketBoundaries TransferBuckets() {
  return {1e-4, 2.5e-4, 5e-4, 1e-3, 2.5e-3, 5e-3, 1e-2, 2.5e-2,
          5e-2, 0.1,    0.25, 0.5,  1.0,    2.5,  5.0};
}

std::vector<MetricFamily> NodeCollector::Collect() const {
  std::vector<MetricFamily> families;
  std::optional<storage::TieredStoreStats> store;
  if (sources_.store != nullptr) store = sources_.store->Stats();
  if (store.has_value()) {
    const storage::HostTierStats& s = store->host;
    const MetricType gauge = MetricType::Gauge;
    const MetricType counter = MetricType::Counter;
    families.push_back(
        HostFamily("strata_tier_capacity_bytes", "Capacity of the tier.", gauge, s.capacity_bytes));
    families.push_back(HostFamily("strata_tier_used_bytes",
                                  "Bytes the tier holds (whole pages for the host tier).", gauge,
                                  s.used_bytes));
    families.push_back(
        HostFamily("strata_tier_chunks", "Committed chunks in the tier.", gauge, s.chunks));
    families.push_back(
        HostFamily("strata_tier_stored_bytes",
                   "Payload bytes as the tier stores them (below the chunks' size where encoded).",
                   gauge, s.payload_bytes));
    families.push_back(
        HostFamily("strata_tier_encoded_chunks",
                   "Chunks the tier stores encoded by a codec ([disk] codec, Compress).", gauge,
                   s.encoded_chunks));
    families.push_back(
        HostFamily("strata_load_decoded_chunks_total",
                   "Host chunks stored encoded (Compress) that loads decoded back in place first.",
                   counter, store->movement.load_decoded));
    families.push_back(HostFamily(
        "strata_load_encoded_chunks_total",
        "Host chunks stored encoded that loads handed to engines as they are, to be decoded on "
        "the engines' devices.",
        counter, store->movement.load_encoded));
    const storage::MovementStats& m = store->movement;
    families.push_back(
        {"strata_host_compressions_total",
         "Chunks committed to the host tier that [host] codec compressed in place, by outcome "
         "(busy: engines read them throughout; skipped: gone, of no known layout, not smaller, "
         "or of a tenant kept exact; dropped: the queue was full).",
         counter,
         {Value(counter, static_cast<double>(m.host_compressed), {{"outcome", "compressed"}}),
          Value(counter, static_cast<double>(m.host_compress_busy), {{"outcome", "busy"}}),
          Value(counter, static_cast<double>(m.host_compress_skipped), {{"outcome", "skipped"}}),
          Value(counter, static_cast<double>(m.host_compress_failed), {{"outcome", "failed"}}),
          Value(counter, static_cast<double>(m.host_compress_dropped), {{"outcome", "dropped"}})}});
    families.push_back({"strata_tier_pinned_bytes",
                        "Payload bytes of pinned chunks, by pin kind.",
                        gauge,
                        {Value(gauge, static_cast<double>(s.hard_pinned_bytes),
                               {{"kind", "hard"}, {"tier", "host"}}),
                         Value(gauge, static_cast<double>(s.soft_pinned_bytes),
                               {{"kind", "soft"}, {"tier", "host"}})}});
    families.push_back(HostFamily("strata_tier_leases",
                                  "Unreleased read leases on chunks of the tier.", gauge,
                                  s.active_leases));
    families.push_back(HostFamily("strata_tier_reserved_bytes",
                                  "Bytes reserved by stores not yet committed.", gauge,
                                  s.reserved_bytes));
    families.push_back(HostFamily("strata_stores_total", "Chunks stored (committed) in the tier.",
                                  counter, s.commits));
    families.push_back(HostFamily("strata_store_bytes_total",
                                  "Payload bytes stored (committed) in the tier.", counter,
                                  s.committed_bytes));
    families.push_back(HostFamily(
        "strata_loads_total", "Chunks leased for loading from the tier (hits).", counter, s.hits));
    families.push_back(HostFamily("strata_load_bytes_total",
                                  "Payload bytes leased for loading from the tier.", counter,
                                  s.hit_bytes));
    families.push_back(HostFamily("strata_load_misses_total",
                                  "Loads that found no usable chunk in the tier.", counter,
                                  s.misses));
    families.push_back(
        {"strata_tier_evictions_total",
         "Chunks that left the tier, by reason: capacity (the eviction policy), "
         "removed (Clear), corrupt (checksum mismatch).",
         counter,
         {Value(counter, static_cast<double>(s.evictions),
                {{"reason", "capacity"}, {"tier", "host"}}),
          Value(counter, static_cast<double>(s.removed), {{"reason", "removed"}, {"tier", "host"}}),
          Value(counter, static_cast<double>(s.checksum_failures),
                {{"reason", "corrupt"}, {"tier", "host"}})}});
    families.push_back(HostFamily("strata_checksum_failures_total",
                                  "Chunks whose payload checksum failed on a load.", counter,
                                  s.checksum_failures));
    families.push_back(HostFamily("strata_io_errors_total",
                                  "I/O errors of the tier (the host tier does no I/O).", counter,
                                  0));
  }
  if (sources_.sessions) {
    const auto [active, total] = sources_.sessions();
    families.push_back({"strata_sessions",
                        "Engine sessions connected now.",
                        MetricType::Gauge,
                        {Value(MetricType::Gauge, static_cast<double>(active), {})}});
    families.push_back({"strata_sessions_total",
                        "Engine sessions accepted since start.",
                        MetricType::Counter,
                        {Value(MetricType::Counter, static_cast<double>(total), {})}});
  }
  if (sources_.lookups != nullptr) AddLookupFamilies(families, *sources_.lookups);
  if (store.has_value() && !store->lower.empty()) {
    for (const storage::LowerTierStats& lower : store->lower) AddLowerTierFamilies(families, lower);
    AddMovementFamilies(families, store->movement);
  }
  if (sources_.remote != nullptr) AddRemoteFamilies(families, *sources_.remote);
  if (sources_.device_pools != nullptr) AddDevicePoolFamilies(families, *sources_.device_pools);
  if (sources_.device_pool_tiering != nullptr) {
    AddDevicePoolTieringFamilies(families, *sources_.device_pool_tiering);
  }
  return families;
}

namespace {

// The address to connect to for reaching a socket listening on `listen_address` ("host:port",
// "[v6]:port" or "port") at `port`: the host, or loopback for a wildcard; empty when it does not
// resolve.
std::vector<std::byte> WakeAddress(const std::string& listen_address, int port) {
  const size_t colon = listen_address.rfind(':');
  std::string host = colon == std::string::npos ? "" : listen_address.substr(0, colon);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
  }
  if (host.empty() || host == "0.0.0.0") host = "127.0.0.1";
  if (host == "::") host = "::1";
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICSERV;
  addrinfo* found = nullptr;
  if (::getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &found) != 0) return {};
  const auto* bytes = reinterpret_cast<const std::byte*>(found->ai_addr);
  std::vector<std::byte> address(bytes, bytes + found->ai_addrlen);
  ::freeaddrinfo(found);
  return address;
}

}  // namespace

MetricsExposer::~MetricsExposer() {
  if (wake_address_.empty()) return;  // exposer_ stops slowly, but stops
  const auto* address = reinterpret_cast<const sockaddr*>(wake_address_.data());
  std::jthread waker([&](std::stop_token stop) {
    while (!stop.stop_requested()) {
      const int fd = ::socket(address->sa_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
      if (fd >= 0) {
        (void)::connect(fd, address, static_cast<socklen_t>(wake_address_.size()));
        ::close(fd);
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
  });
  exposer_.reset();
}

absl::StatusOr<std::unique_ptr<MetricsExposer>> MetricsExposer::Create(
    const std::string& listen_address,
    const std::vector<std::shared_ptr<prometheus::Collectable>>& collectables) {
  try {
    auto exposer = std::make_unique<prometheus::Exposer>(listen_address);
    for (const auto& collectable : collectables) exposer->RegisterCollectable(collectable);
    const std::vector<int> ports = exposer->GetListeningPorts();
    if (ports.empty()) {
      return absl::UnavailableError(fmt::format("metrics: cannot listen on '{}'", listen_address));
    }
    return std::unique_ptr<MetricsExposer>(
        new MetricsExposer(std::move(exposer), ports[0], WakeAddress(listen_address, ports[0])));
  } catch (const std::exception& e) {
    return absl::UnavailableError(
        fmt::format("metrics: cannot listen on '{}': {}", listen_address, e.what()));
  }
}

}  // namespace strata::daemon
