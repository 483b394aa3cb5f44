#include "daemon/metrics.h"

#include <netdb.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <exception>
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
void AddSeries(std::vector<MetricFamily>& families, const char* name, const char* help,
               MetricType type, uint64_t value, std::vector<ClientMetric::Label> labels) {
  for (MetricFamily& family : families) {
    if (family.name == name) {
      family.metric.push_back(Value(type, static_cast<double>(value), std::move(labels)));
      return;
    }
  }
  families.push_back({name, help, type, {Value(type, static_cast<double>(value), labels)}});
}

void AddDiskFamilies(std::vector<MetricFamily>& families, const storage::DiskTierStats& s) {
  const MetricType gauge = MetricType::Gauge;
  const MetricType counter = MetricType::Counter;
  const std::vector<ClientMetric::Label> disk = {{"tier", "disk"}};
  AddSeries(families, "strata_tier_capacity_bytes", "Capacity of the tier.", gauge,
            s.capacity_bytes, disk);
  AddSeries(families, "strata_tier_used_bytes",
            "Bytes the tier holds (whole pages for the host tier).", gauge, s.used_bytes(), disk);
  AddSeries(families, "strata_tier_chunks", "Committed chunks in the tier.", gauge, s.chunks, disk);
  AddSeries(families, "strata_tier_evictions_total", "", counter, s.evictions,
            {{"reason", "capacity"}, {"tier", "disk"}});
  AddSeries(families, "strata_tier_evictions_total", "", counter, s.dropped_records,
            {{"reason", "corrupt"}, {"tier", "disk"}});
  AddSeries(families, "strata_checksum_failures_total",
            "Chunks whose payload checksum failed on a load.", counter, s.checksum_failures, disk);
  AddSeries(families, "strata_io_errors_total", "", counter, s.io_errors, disk);
  AddSeries(families, "strata_disk_reads_total",
            "Chunks read from the disk tier (promotions into the host tier).", counter, s.reads,
            {});
  AddSeries(families, "strata_disk_read_bytes_total", "Payload bytes read from the disk tier.",
            counter, s.read_bytes, {});
  AddSeries(families, "strata_disk_writes_total", "Chunks written to the disk tier.", counter,
            s.writes, {});
  AddSeries(families, "strata_disk_written_bytes_total", "Payload bytes written to the disk tier.",
            counter, s.written_bytes, {});
}

}  // namespace

prometheus::Histogram::BucketBoundaries LatencyBuckets() {
  return {1e-5, 2.5e-5, 5e-5, 1e-4, 2.5e-4, 5e-4, 1e-3, 2.5e-3, 5e-3, 1e-2, 2.5e-2, 0.1, 1.0};
}

std::vector<MetricFamily> NodeCollector::Collect() const {
  std::vector<MetricFamily> families;
  if (sources_.host_tier != nullptr) {
    const storage::HostTierStats s = sources_.host_tier->Stats();
    const MetricType gauge = MetricType::Gauge;
    const MetricType counter = MetricType::Counter;
    families.push_back(
        HostFamily("strata_tier_capacity_bytes", "Capacity of the tier.", gauge, s.capacity_bytes));
    families.push_back(HostFamily("strata_tier_used_bytes",
                                  "Bytes the tier holds (whole pages for the host tier).", gauge,
                                  s.used_bytes));
    families.push_back(
        HostFamily("strata_tier_chunks", "Committed chunks in the tier.", gauge, s.chunks));
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
  if (sources_.lookups) {
    const auto [lookups, hit_tokens, miss_tokens] = sources_.lookups();
    families.push_back({"strata_lookups_total",
                        "Control API Lookup calls answered.",
                        MetricType::Counter,
                        {Value(MetricType::Counter, static_cast<double>(lookups), {})}});
    families.push_back({"strata_lookup_hit_tokens_total",
                        "Tokens of Lookup calls found cached.",
                        MetricType::Counter,
                        {Value(MetricType::Counter, static_cast<double>(hit_tokens), {})}});
    families.push_back({"strata_lookup_miss_tokens_total",
                        "Tokens of Lookup calls not cached.",
                        MetricType::Counter,
                        {Value(MetricType::Counter, static_cast<double>(miss_tokens), {})}});
  }
  if (sources_.disk_tier != nullptr) AddDiskFamilies(families, sources_.disk_tier->stats());
  if (sources_.disk_mover != nullptr) {
    const MetricType counter = MetricType::Counter;
    families.push_back(
        {"strata_demotions_total",
         "Chunks the host tier evicted to the disk tier, by result (failed: the copy was lost).",
         counter,
         {Value(counter, static_cast<double>(sources_.disk_mover->demoted()),
                {{"result", "written"}}),
          Value(counter, static_cast<double>(sources_.disk_mover->failed()),
                {{"result", "failed"}})}});
  }
  if (sources_.disk_promoter != nullptr) {
    const storage::DiskPromoterStats p = sources_.disk_promoter->Stats();
    const MetricType counter = MetricType::Counter;
    families.push_back(
        {"strata_prefetch_chunks_total",
         "Chunks engines' Prefetch requests queued for promotion, by outcome (skipped: in the "
         "host tier already, gone from disk, or another writer's).",
         counter,
         {Value(counter, static_cast<double>(p.promoted), {{"outcome", "promoted"}}),
          Value(counter, static_cast<double>(p.skipped), {{"outcome", "skipped"}}),
          Value(counter, static_cast<double>(p.failed), {{"outcome", "failed"}})}});
  }
  if (sources_.disk_write_through != nullptr) {
    const storage::DiskWriteThroughStats w = sources_.disk_write_through->Stats();
    const MetricType counter = MetricType::Counter;
    families.push_back(
        {"strata_write_through_chunks_total",
         "Chunks committed in the host tier and written through to disk, by outcome (skipped: on "
         "disk already or gone from the host tier; dropped: the queue was full; cancelled: removed "
         "during the write).",
         counter,
         {Value(counter, static_cast<double>(w.written), {{"outcome", "written"}}),
          Value(counter, static_cast<double>(w.skipped), {{"outcome", "skipped"}}),
          Value(counter, static_cast<double>(w.dropped), {{"outcome", "dropped"}}),
          Value(counter, static_cast<double>(w.failed), {{"outcome", "failed"}}),
          Value(counter, static_cast<double>(w.cancelled), {{"outcome", "cancelled"}})}});
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
