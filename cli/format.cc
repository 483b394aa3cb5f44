#include "cli/format.h"

#include <google/protobuf/util/json_util.h>

#include "fmt/format.h"
#include "proto/convert.h"

namespace strata::cli {
namespace {

std::string TierName(v1::Tier tier) {
  switch (tier) {
    case v1::TIER_DEVICE:
      return "device";
    case v1::TIER_HOST:
      return "host";
    case v1::TIER_DISK:
      return "disk";
    case v1::TIER_REMOTE:
      return "remote";
    default:
      return "?";
  }
}

}  // namespace

std::string ToJson(const google::protobuf::Message& message) {
  google::protobuf::util::JsonPrintOptions options;
  options.always_print_primitive_fields = true;
  options.preserve_proto_field_names = true;
  std::string json;
  if (!google::protobuf::util::MessageToJsonString(message, &json, options).ok()) return "{}";
  return json + "\n";
}

std::string HumanBytes(uint64_t bytes) {
  static constexpr const char* kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double value = static_cast<double>(bytes);
  int unit = 0;
  while (value >= 1024 && unit < 4) {
    value /= 1024;
    ++unit;
  }
  return unit == 0 ? fmt::format("{} B", bytes) : fmt::format("{:.1f} {}", value, kUnits[unit]);
}

std::string FormatHealth(const v1::HealthResponse& health) {
  const char* status = health.status() == v1::HealthResponse::SERVING_STATUS_SERVING    ? "serving"
                       : health.status() == v1::HealthResponse::SERVING_STATUS_DRAINING ? "draining"
                                                                                        : "unknown";
  return fmt::format("status   {}\nversion  {}\nuptime   {} s\n", status, health.version(),
                     health.uptime_seconds());
}

std::string FormatStats(const v1::StatsResponse& stats) {
  std::string out = fmt::format(
      "{:<7} {:>11} {:>11} {:>9} {:>11} {:>9} {:>7} {:>9} {:>9} {:>9} {:>6}\n", "tier", "capacity",
      "used", "chunks", "pinned", "leases", "hits", "misses", "evicted", "badsum", "use%");
  for (const v1::TierStats& t : stats.tiers()) {
    const double use = t.capacity_bytes() == 0 ? 0.0
                                               : 100.0 * static_cast<double>(t.used_bytes()) /
                                                     static_cast<double>(t.capacity_bytes());
    out += fmt::format("{:<7} {:>11} {:>11} {:>9} {:>11} {:>9} {:>7} {:>9} {:>9} {:>9} {:>5.1f}%\n",
                       TierName(t.tier()), HumanBytes(t.capacity_bytes()),
                       HumanBytes(t.used_bytes()), t.chunks(), HumanBytes(t.pinned_bytes()),
                       t.leases(), t.hits(), t.misses(), t.evictions(), t.checksum_failures(), use);
  }
  const uint64_t looked_up = stats.hit_tokens() + stats.miss_tokens();
  out +=
      fmt::format("sessions {}  lookups {}  hit tokens {}  miss tokens {}  token hit ratio {}\n",
                  stats.sessions(), stats.lookups(), stats.hit_tokens(), stats.miss_tokens(),
                  looked_up == 0 ? std::string("-")
                                 : fmt::format("{:.3f}", static_cast<double>(stats.hit_tokens()) /
                                                             static_cast<double>(looked_up)));
  return out;
}

std::string FormatLookup(const v1::LookupResponse& lookup) {
  std::string out =
      fmt::format("matched {} tokens: {} of {} chunks cached\n", lookup.matched_tokens(),
                  lookup.matched_chunks(), lookup.total_chunks());
  for (int i = 0; i < lookup.hits_size(); ++i) {
    const v1::ChunkHit& hit = lookup.hits(i);
    absl::StatusOr<ChunkKey> key = FromProto(hit.key());
    out += fmt::format("  {:>4}  {:<6}  {}\n", i, TierName(hit.tier()),
                       key.ok() ? key->ToString() : std::string("<malformed key>"));
  }
  return out;
}

std::string FormatHash(const HashReport& report, bool json) {
  const uint64_t fingerprint = report.layout.Fingerprint();
  if (json) {
    std::string keys;
    for (size_t i = 0; i < report.keys.size(); ++i) {
      keys += fmt::format("{}{{\"index\":{},\"tokens\":{},\"key\":\"{}\",\"event_id\":{}}}",
                          i == 0 ? "" : ",", i, report.chunk_token_counts[i],
                          report.keys[i].ToString(), report.keys[i].EventId());
    }
    return fmt::format(
        "{{\"algorithm\":\"{}\",\"seed\":\"{}\",\"layout\":\"{}\",\"layout_fingerprint\":"
        "\"{:016x}\",\"chunks\":[{}]}}\n",
        HashAlgorithmName(report.algorithm), report.seed, report.layout.DebugString(), fingerprint,
        keys);
  }
  std::string out = fmt::format(
      "algorithm    {}\nseed         \"{}\"\nlayout       {}\nfingerprint  {:016x}\n",
      HashAlgorithmName(report.algorithm), report.seed, report.layout.DebugString(), fingerprint);
  out += fmt::format("{:>5}  {:>6}  {}\n", "chunk", "tokens", "key");
  for (size_t i = 0; i < report.keys.size(); ++i) {
    out += fmt::format("{:>5}  {:>6}  {}\n", i, report.chunk_token_counts[i],
                       report.keys[i].ToString());
  }
  return out;
}

}  // namespace strata::cli
