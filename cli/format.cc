#include "cli/format.h"

#include <cctype>
#include <sstream>

#include <google/protobuf/util/json_util.h>

#include "fmt/format.h"
#include "proto/convert.h"

namespace strata::cli {
namespace {

std::string KeyText(const v1::ChunkKey& proto) {
  absl::StatusOr<ChunkKey> key = FromProto(proto);
  return key.ok() ? key->ToString() : std::string("<malformed key>");
}

const char* CauseName(v1::ChunkEvent::RemovalCause cause) {
  switch (cause) {
    case v1::ChunkEvent::REMOVAL_CAUSE_EVICTED:
      return "evicted";
    case v1::ChunkEvent::REMOVAL_CAUSE_REMOVED:
      return "removed";
    case v1::ChunkEvent::REMOVAL_CAUSE_CORRUPT:
      return "corrupt";
    default:
      return "?";
  }
}

constexpr std::pair<std::string_view, v1::Tier> kTiers[] = {{"device", v1::TIER_DEVICE},
                                                            {"host", v1::TIER_HOST},
                                                            {"disk", v1::TIER_DISK},
                                                            {"remote", v1::TIER_REMOTE}};

}  // namespace

absl::StatusOr<v1::Tier> ParseTier(std::string_view name) {
  for (const auto& [tier_name, tier] : kTiers) {
    if (name == tier_name) return tier;
  }
  return absl::InvalidArgumentError(
      fmt::format("tier '{}' is not one of device, host, disk, remote", name));
}

std::string TierName(v1::Tier tier) {
  for (const auto& [name, value] : kTiers) {
    if (tier == value) return std::string(name);
  }
  return "?";
}

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

namespace {

// "<what> N  hit tokens H  miss tokens M  token hit ratio R" ("-" before any token).
std::string LookupLine(std::string_view what, uint64_t lookups, uint64_t hit_tokens,
                       uint64_t miss_tokens) {
  const uint64_t looked_up = hit_tokens + miss_tokens;
  return fmt::format("{} {}  hit tokens {}  miss tokens {}  token hit ratio {}\n", what, lookups,
                     hit_tokens, miss_tokens,
                     looked_up == 0 ? std::string("-")
                                    : fmt::format("{:.3f}", static_cast<double>(hit_tokens) /
                                                                static_cast<double>(looked_up)));
}

}  // namespace

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
  out += fmt::format("sessions {}\n", stats.sessions());
  out += LookupLine("engine lookups", stats.lookups(), stats.hit_tokens(), stats.miss_tokens());
  for (const v1::TierStats& t : stats.tiers()) {
    if (t.hit_tokens() == 0) continue;
    out += fmt::format("  hit tokens in {:<6} {}\n", TierName(t.tier()), t.hit_tokens());
  }
  for (const v1::TenantLookups& tenant : stats.tenants()) {
    const v1::LookupTotals& t = tenant.totals();
    out += LookupLine(fmt::format("  tenant '{}' lookups", tenant.tenant()), t.lookups(),
                      t.hit_tokens(), t.miss_tokens());
  }
  const v1::LookupTotals& control = stats.control_lookups();
  out +=
      LookupLine("control lookups", control.lookups(), control.hit_tokens(), control.miss_tokens());
  return out;
}

std::string FormatPeers(const v1::ListPeersResponse& peers) {
  if (!peers.remote_enabled()) return "remote tier off ([remote] listen_address)\n";
  std::string out = fmt::format("this node: {} on {}\n", peers.node_id(), peers.listen_address());
  if (peers.peers().empty()) return out + "no peers\n";
  out += fmt::format("{:<22} {:<24} {:<4} {:<11} {:>10} {:>10} {:>7}  {}\n", "address", "node",
                     "dir", "state", "read", "served", "streams", "last error");
  for (const v1::Peer& peer : peers.peers()) {
    std::string state = v1::Peer::State_Name(peer.state());
    if (state.starts_with("STATE_")) state = state.substr(6);
    for (char& c : state) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    out +=
        fmt::format("{:<22} {:<24} {:<4} {:<11} {:>10} {:>10} {:>7}  {}\n", peer.address(),
                    peer.node_id().empty() ? "-" : peer.node_id(), peer.outbound() ? "out" : "in",
                    state, HumanBytes(peer.bytes_read()), HumanBytes(peer.bytes_served()),
                    fmt::format("{}/{}", peer.streams_in(), peer.streams_out()),
                    peer.last_error().empty() ? "-" : peer.last_error());
  }
  return out;
}

std::string FormatLookup(const v1::LookupResponse& lookup) {
  std::string out =
      fmt::format("matched {} tokens: {} of {} chunks cached\n", lookup.matched_tokens(),
                  lookup.matched_chunks(), lookup.total_chunks());
  for (int i = 0; i < lookup.hits_size(); ++i) {
    const v1::ChunkHit& hit = lookup.hits(i);
    out += fmt::format("  {:>4}  {:<6}  {}\n", i, TierName(hit.tier()), KeyText(hit.key()));
  }
  return out;
}

std::string FormatClusterLookup(const v1::ClusterLookupResponse& lookup) {
  const std::string incomplete =
      lookup.complete()
          ? ""
          : fmt::format("(the controller's index is incomplete: {})\n", lookup.incomplete_reason());
  if (lookup.instances().empty()) {
    return fmt::format("no instance holds the first of {} chunks\n{}", lookup.total_chunks(),
                       incomplete);
  }
  std::string out =
      fmt::format("{:<28} {:>14} {:>10}  {}\n", "instance", "chunks", "tokens", "tiers");
  for (const v1::InstancePrefix& prefix : lookup.instances()) {
    std::string tiers;
    for (const v1::TierChunks& tier : prefix.tiers()) {
      tiers +=
          fmt::format("{}{} {}", tiers.empty() ? "" : ", ", tier.chunks(), TierName(tier.tier()));
    }
    out += fmt::format("{:<28} {:>14} {:>10}  {}\n", prefix.instance_id(),
                       fmt::format("{} of {}", prefix.matched_chunks(), lookup.total_chunks()),
                       prefix.matched_tokens(), tiers);
  }
  return out + incomplete;
}

std::string FormatRoute(const v1::RouteResponse& route) {
  std::string out =
      fmt::format("{} prompt tokens; modelled TTFT in ms, lowest first\n", route.prompt_tokens());
  out += fmt::format("{:>4}  {:<28} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9}\n", "rank", "instance",
                     "ttft", "queue", "load", "prefill", "cached", "loaded");
  int rank = 1;
  for (const v1::RouteScore& score : route.ranked()) {
    out += fmt::format("{:>4}  {:<28} {:>9.2f} {:>9.2f} {:>9.2f} {:>9.2f} {:>9} {:>9}\n", rank++,
                       score.instance_id(), score.modelled_ttft_s() * 1e3, score.queue_s() * 1e3,
                       score.load_s() * 1e3, score.prefill_s() * 1e3, score.cached_tokens(),
                       score.loaded_tokens());
  }
  return out;
}

std::string FormatInstances(const v1::ListInstancesResponse& instances) {
  if (instances.instances().empty()) return "no instance is registered\n";
  std::string out = fmt::format("{:<28} {:<24} {:<9} {:>9} {:>9} {:>10}\n", "instance", "control",
                                "indexed", "heard ms", "snapshots", "events");
  for (const v1::InstanceInfo& info : instances.instances()) {
    out += fmt::format("{:<28} {:<24} {:<9} {:>9} {:>9} {:>10}\n", info.instance_id(),
                       info.control_endpoint(), info.following() ? "yes" : "no",
                       info.ms_since_heartbeat(), info.snapshots(), info.events_applied());
  }
  return out;
}

std::string FormatClusterStats(const v1::ClusterStatsResponse& stats) {
  const v1::ClusterIndexStats& index = stats.index();
  std::string out = fmt::format(
      "cluster: {} instances, {} indexed; index: {} chunks, {} entries ({} stale), {}\n",
      stats.instances(), stats.following(), index.chunks(), index.live_entries(),
      index.stale_entries(), HumanBytes(index.memory_bytes()));
  out += stats.complete() ? "index: complete\n"
                          : fmt::format("index: incomplete: {}\n", stats.incomplete_reason());
  out += fmt::format("totals of {} answering instances:\n", stats.answered());
  std::istringstream lines(FormatStats(stats.totals()));
  for (std::string line; std::getline(lines, line);) out += "  " + line + "\n";
  for (const v1::NodeResult& node : stats.nodes()) {
    if (node.code() == 0) continue;
    out += fmt::format("{}: error: {} ({})\n", node.instance_id(), node.message(),
                       absl::StatusCodeToString(static_cast<absl::StatusCode>(node.code())));
  }
  return out;
}

std::string FormatNodeResult(const v1::NodeResult& result, v1::Tier move_target,
                             std::string_view peer) {
  switch (result.response_case()) {
    case v1::NodeResult::kPin:
      return FormatPin(result.pin());
    case v1::NodeResult::kUnpin:
      return FormatUnpin(result.unpin());
    case v1::NodeResult::kClear:
      return FormatClear(result.clear());
    case v1::NodeResult::kMove:
      return FormatMove(result.move(), move_target, peer);
    case v1::NodeResult::kStats:
      return FormatStats(result.stats());
    case v1::NodeResult::kCompress:
      return FormatCompress(result.compress());
    case v1::NodeResult::kDecompress:
      return FormatDecompress(result.decompress());
    case v1::NodeResult::RESPONSE_NOT_SET:
      break;
  }
  return "done\n";
}

const google::protobuf::Message& NodeResponse(const v1::NodeResult& result) {
  switch (result.response_case()) {
    case v1::NodeResult::kPin:
      return result.pin();
    case v1::NodeResult::kUnpin:
      return result.unpin();
    case v1::NodeResult::kClear:
      return result.clear();
    case v1::NodeResult::kMove:
      return result.move();
    case v1::NodeResult::kStats:
      return result.stats();
    case v1::NodeResult::kCompress:
      return result.compress();
    case v1::NodeResult::kDecompress:
      return result.decompress();
    case v1::NodeResult::RESPONSE_NOT_SET:
      break;
  }
  return result;
}

std::string FormatForwarded(const v1::NodeCallResponse& forwarded,
                            const std::function<std::string(const v1::NodeResult&)>& format) {
  if (forwarded.results().empty()) return "no instance is registered\n";
  std::string out;
  for (const v1::NodeResult& result : forwarded.results()) {
    if (result.code() != 0) {
      out += fmt::format("{}: error: {} ({})\n", result.instance_id(), result.message(),
                         absl::StatusCodeToString(static_cast<absl::StatusCode>(result.code())));
      continue;
    }
    out += fmt::format("{}:\n", result.instance_id());
    std::istringstream lines(format(result));
    for (std::string line; std::getline(lines, line);) out += "  " + line + "\n";
  }
  return out;
}

std::string FormatPin(const v1::PinResponse& pin) {
  return fmt::format("pinned {} chunks ({}); {} not cached\n", pin.pinned_chunks(),
                     HumanBytes(pin.pinned_bytes()), pin.missing_chunks());
}

std::string FormatUnpin(const v1::UnpinResponse& unpin) {
  return fmt::format("unpinned {} chunks; {} not cached\n", unpin.unpinned_chunks(),
                     unpin.missing_chunks());
}

std::string FormatMove(const v1::MoveResponse& move, v1::Tier target, std::string_view instance) {
  if (!instance.empty()) {
    return fmt::format("copied {} chunks to {}'s host tier; {} already there; {} not cached\n",
                       move.moved_chunks(), instance, move.already_in_target(),
                       move.missing_chunks());
  }
  return fmt::format("moved {} chunks to {}; {} already there; {} not cached\n",
                     move.moved_chunks(), TierName(target), move.already_in_target(),
                     move.missing_chunks());
}

std::string FormatClear(const v1::ClearResponse& clear) {
  return fmt::format("removed {} chunks ({})\n", clear.removed_chunks(),
                     HumanBytes(clear.removed_bytes()));
}

std::string FormatCompress(const v1::CompressResponse& compress) {
  std::string out =
      fmt::format("compressed {} chunks ({} -> {}); {} compressed already; {} not in the tier\n",
                  compress.compressed_chunks(), HumanBytes(compress.stored_bytes_before()),
                  HumanBytes(compress.stored_bytes_after()), compress.already_compressed(),
                  compress.missing_chunks());
  if (compress.not_smaller_chunks() + compress.unknown_layout_chunks() + compress.busy_chunks() >
      0) {
    out += fmt::format(
        "left as they were: {} the codec would not shrink, {} of a layout the tier does not know "
        "(give the layout flags), {} engines kept reading (retry)\n",
        compress.not_smaller_chunks(), compress.unknown_layout_chunks(), compress.busy_chunks());
  }
  if (compress.no_importance_chunks() > 0) {
    out += fmt::format(
        "left whole: {} no engine reported the importance of (drop_h2o keeps the heaviest blocks "
        "engines saw)\n",
        compress.no_importance_chunks());
  }
  if (compress.compressed_chunks() > 0) {
    out += fmt::format("largest error: relative {:.3g}, absolute {:.3g} (the codec promises: {})\n",
                       compress.max_relative_error(), compress.max_abs_error(),
                       compress.error_bound());
  }
  return out;
}

std::string FormatDecompress(const v1::DecompressResponse& decompress) {
  std::string out =
      fmt::format("decompressed {} chunks ({} -> {}); {} not compressed; {} not in the tier\n",
                  decompress.decompressed_chunks(), HumanBytes(decompress.stored_bytes_before()),
                  HumanBytes(decompress.stored_bytes_after()), decompress.not_compressed(),
                  decompress.missing_chunks());
  if (decompress.busy_chunks() > 0) {
    out += fmt::format("left as they were: {} engines kept reading (retry)\n",
                       decompress.busy_chunks());
  }
  return out;
}

std::string FormatDrain(const v1::DrainResponse& drain) {
  return fmt::format(
      "draining: no new chunks are admitted\nresident {} chunks ({}), {} open reservations; "
      "flushed {} chunks\n",
      drain.resident_chunks(), HumanBytes(drain.resident_bytes()), drain.open_reservations(),
      drain.flushed_chunks());
}

std::string FormatChunks(const v1::ListChunksResponse& page) {
  std::string out =
      fmt::format("{:<6} {:>6} {:>10} {:>10} {:<8} {:<4} {:>10} {:>6}  {}\n", "tier", "tokens",
                  "size", "stored", "codec", "pin", "soft-ttl", "leases", "key");
  for (const v1::ChunkEntry& chunk : page.chunks()) {
    const std::string ttl = chunk.soft_pin_remaining_ms() == 0
                                ? std::string("-")
                                : fmt::format("{} ms", chunk.soft_pin_remaining_ms());
    const char* pin = chunk.hard_pinned()                 ? "hard"
                      : chunk.soft_pin_remaining_ms() > 0 ? "soft"
                                                          : "-";
    out +=
        fmt::format("{:<6} {:>6} {:>10} {:>10} {:<8} {:<4} {:>10} {:>6}  {}\n",
                    TierName(chunk.tier()), chunk.num_tokens(), HumanBytes(chunk.size_bytes()),
                    HumanBytes(chunk.stored_bytes()), chunk.codec().empty() ? "-" : chunk.codec(),
                    pin, ttl, chunk.leases(), KeyText(chunk.key()));
  }
  out += fmt::format("{} chunks", page.chunks_size());
  if (!page.next_page_token().empty()) {
    out += fmt::format("; more with --page-token {}", page.next_page_token());
  }
  return out + "\n";
}

std::string FormatEvent(const v1::ChunkEvent& event) {
  std::string what;
  switch (event.event_case()) {
    case v1::ChunkEvent::kStored:
      what = fmt::format("stored   {}  tokens {}  parent {}", KeyText(event.stored().key()),
                         event.stored().num_tokens(),
                         event.stored().has_parent() ? KeyText(event.stored().parent()) : "-");
      break;
    case v1::ChunkEvent::kRemoved:
      what = fmt::format("removed  {}  ({})", KeyText(event.removed().key()),
                         CauseName(event.removed().cause()));
      break;
    case v1::ChunkEvent::kCleared:
      what = "cleared  every chunk";
      break;
    default:
      what = "?";
  }
  return fmt::format("{:>8}  {:<6} {}\n", event.sequence(), TierName(event.tier()), what);
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
