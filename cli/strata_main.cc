// strata: the operator's CLI for a Strata daemon.
//   strata status | stats | lookup | hash | pin | unpin | move | clear | ls | drain | events
//   (strata --help, strata <command> --help). --json everywhere (events: one JSON object a line).
// Exit codes: 0 success; 1 the daemon answered with an error or could not be reached; 2 a usage
// error or a request the daemon rejected as invalid (INVALID_ARGUMENT).
#include <charconv>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <optional>
#include <sstream>

#include "CLI/CLI.hpp"
#include "cli/control_client.h"
#include "cli/format.h"
#include "core/fmt_absl.h"
#include "core/key_hasher.h"
#include "core/status_util.h"
#include "fmt/format.h"
#include "proto/convert.h"

namespace strata::cli {
namespace {

struct LayoutFlags {
  std::string model = "model";
  std::string kind = KvKindName(KvLayout().kind);
  uint32_t layers = 32;
  uint32_t kv_heads = 8;
  uint32_t head_dim = 128;
  std::string dtype = DtypeName(KvLayout().dtype);
  uint32_t tp_rank = 0;
  uint32_t tp_size = 1;
  std::string positional = PositionalFormatName(KvLayout().positional);
  uint32_t chunk_tokens = KvLayout::kDefaultChunkTokens;

  void Register(CLI::App* app) {
    app->add_option("--model", model, "model id")->capture_default_str();
    app->add_option("--kind", kind, "mha|mla (or an alias, e.g. gqa)")->capture_default_str();
    app->add_option("--layers", layers, "layers")->capture_default_str();
    app->add_option("--kv-heads", kv_heads, "KV heads of this TP rank")->capture_default_str();
    app->add_option("--head-dim", head_dim, "head dimension")->capture_default_str();
    app->add_option("--dtype", dtype, "fp16|bf16|fp32|fp8_e4m3|int8 (or an alias, e.g. bfloat16)")
        ->capture_default_str();
    app->add_option("--tp-rank", tp_rank, "TP rank")->capture_default_str();
    app->add_option("--tp-size", tp_size, "TP world size")->capture_default_str();
    app->add_option("--positional", positional, "rope|nope")->capture_default_str();
    app->add_option("--chunk-tokens", chunk_tokens, "tokens per chunk")->capture_default_str();
  }

  absl::StatusOr<KvLayout> Build() const {
    KvLayout layout;
    layout.model_id = model;
    // One parser for these names everywhere (core/kv_layout.h), aliases included.
    absl::StatusOr<KvKind> parsed_kind = ParseKvKind(kind);
    if (!parsed_kind.ok()) return Annotate(parsed_kind.status(), "--kind");
    layout.kind = *parsed_kind;
    absl::StatusOr<KvDtype> parsed_dtype = ParseKvDtype(dtype);
    if (!parsed_dtype.ok()) return Annotate(parsed_dtype.status(), "--dtype");
    layout.dtype = *parsed_dtype;
    absl::StatusOr<PositionalFormat> parsed_positional = ParsePositionalFormat(positional);
    if (!parsed_positional.ok()) return Annotate(parsed_positional.status(), "--positional");
    layout.positional = *parsed_positional;
    layout.num_layers = layers;
    layout.num_kv_heads = kv_heads;
    layout.head_dim = head_dim;
    layout.tp_rank = tp_rank;
    layout.tp_world_size = tp_size;
    layout.chunk_tokens = chunk_tokens;
    if (absl::Status s = layout.Validate(); !s.ok()) return s;
    return layout;
  }
};

// Token ids separated by commas and/or whitespace.
absl::StatusOr<std::vector<uint32_t>> ParseTokens(std::string_view text) {
  std::vector<uint32_t> tokens;
  size_t i = 0;
  while (i < text.size()) {
    if (text[i] == ',' || std::isspace(static_cast<unsigned char>(text[i]))) {
      ++i;
      continue;
    }
    uint32_t value = 0;
    const auto [end, error] = std::from_chars(text.data() + i, text.data() + text.size(), value);
    if (error != std::errc() || end == text.data() + i) {
      return absl::InvalidArgumentError(
          fmt::format("malformed token list near '{}'", text.substr(i, 16)));
    }
    tokens.push_back(value);
    i = static_cast<size_t>(end - text.data());
  }
  return tokens;
}

absl::StatusOr<std::string> ReadText(const std::string& file) {
  std::ifstream in(file);
  if (!in) return absl::InvalidArgumentError(fmt::format("cannot read '{}'", file));
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

absl::StatusOr<std::vector<uint32_t>> ReadTokens(const std::string& inline_tokens,
                                                 const std::string& file) {
  if (!file.empty()) {
    absl::StatusOr<std::string> text = ReadText(file);
    if (!text.ok()) return text.status();
    return ParseTokens(*text);
  }
  return ParseTokens(inline_tokens);
}

// Chunks named on the command line: --key (repeatable), or a prompt's tokens with the layout.
struct SelectorFlags {
  LayoutFlags layout;
  std::string tokens_text;
  std::string tokens_file;
  std::string tenant_salt;
  std::string lora;
  std::vector<std::string> keys;

  void Register(CLI::App* app, bool with_keys) {
    layout.Register(app);
    app->add_option("--tokens", tokens_text, "token ids, e.g. 1,2,3");
    app->add_option("--tokens-file", tokens_file, "file of token ids");
    app->add_option("--tenant-salt", tenant_salt, "tenant salt");
    app->add_option("--lora", lora, "LoRA adapter name");
    if (with_keys) app->add_option("--key", keys, "a chunk key as `strata ls` prints it");
  }

  absl::StatusOr<std::vector<uint32_t>> Tokens() const {
    return ReadTokens(tokens_text, tokens_file);
  }

  // A key selection when --key is given, else a token chain (tokens required).
  absl::StatusOr<v1::ChunkSelector> Build() const {
    v1::ChunkSelector selector;
    if (!keys.empty()) {
      if (!tokens_text.empty() || !tokens_file.empty()) {
        return absl::InvalidArgumentError("give either --key or --tokens/--tokens-file");
      }
      for (const std::string& text : keys) {
        absl::StatusOr<ChunkKey> key = ChunkKey::Parse(text);
        if (!key.ok()) return key.status();
        *selector.add_keys() = ToProto(*key);
      }
      return selector;
    }
    absl::StatusOr<std::vector<uint32_t>> tokens = Tokens();
    if (!tokens.ok()) return tokens.status();
    if (tokens->empty()) return absl::InvalidArgumentError("no chunks: give --tokens or --key");
    absl::StatusOr<KvLayout> built = layout.Build();
    if (!built.ok()) return built.status();
    *selector.mutable_layout() = ToProto(*built);
    for (uint32_t t : *tokens) selector.add_tokens(t);
    selector.set_tenant_salt(tenant_salt);
    selector.set_lora_name(lora);
    return selector;
  }
};

// A Lookup of the selected chunks, every cached key returned. Tokens go as 4-byte words: the
// cheap encoding of a long prompt (see LookupRequest.tokens_fixed32).
v1::LookupRequest LookupRequestFor(const v1::ChunkSelector& selector) {
  v1::LookupRequest request;
  if (selector.has_layout()) *request.mutable_layout() = selector.layout();
  request.mutable_tokens_fixed32()->Assign(selector.tokens().begin(), selector.tokens().end());
  *request.mutable_keys() = selector.keys();
  request.set_tenant_salt(selector.tenant_salt());
  request.set_lora_name(selector.lora_name());
  request.set_with_keys(true);
  return request;
}

// "node-a=1200" -> a candidate with 1200 queued prefill tokens ("node-a": none queued). The
// last '=' splits, so an instance id may hold one.
absl::StatusOr<v1::RouteCandidate> ParseCandidate(std::string_view text) {
  v1::RouteCandidate candidate;
  const size_t equals = text.rfind('=');
  candidate.set_instance_id(std::string(text.substr(0, equals)));
  if (equals != std::string_view::npos) {
    const std::string_view queued = text.substr(equals + 1);
    uint64_t tokens = 0;
    auto [end, ec] = std::from_chars(queued.data(), queued.data() + queued.size(), tokens);
    if (ec != std::errc() || end != queued.data() + queued.size()) {
      return absl::InvalidArgumentError(
          fmt::format("--candidate '{}': the queued tokens after '=' are not a number", text));
    }
    candidate.set_queued_prefill_tokens(tokens);
  }
  return candidate;
}

// Prints `response` as JSON or through `format`; the exit code.
template <typename Response, typename Format>
int Print(const absl::StatusOr<Response>& response, bool json, Format format);

int Fail(const absl::Status& status) {
  std::cerr << "strata: " << fmt::format("{}", status) << "\n";
  return status.code() == absl::StatusCode::kInvalidArgument ? 2 : 1;
}

template <typename Response, typename Format>
int Print(const absl::StatusOr<Response>& response, bool json, Format format) {
  if (!response.ok()) return Fail(response.status());
  std::cout << (json ? ToJson(*response) : format(*response));
  return 0;
}

int Run(int argc, char** argv) {
  CLI::App app{"strata: operate a Strata KV-cache daemon, or (--controller) the cluster"};
  app.require_subcommand(1);
  std::string addr = "127.0.0.1:50051";
  bool json = false;
  uint32_t timeout_ms = 5000;
  app.add_option("--addr", addr, "daemon control address: host:port or unix:///path")
      ->capture_default_str();
  app.add_flag("--json", json, "machine-readable output");
  app.add_option("--timeout-ms", timeout_ms, "deadline of each call")->capture_default_str();
  std::string token_file, tls_ca;
  app.add_option("--token-file", token_file,
                 "file holding the bearer token the daemon requires over TCP");
  app.add_option("--tls-ca", tls_ca, "PEM CA certificate of the daemon: TLS over TCP");
  std::string controller, node;
  app.add_option("--controller", controller,
                 "strata-controller's address, host:port (or several, comma-separated: the one "
                 "that leads answers): lookup and stats ask the cluster (stats: "
                 "every instance's, summed); pin, unpin, move, clear, compress and decompress go "
                 "to every instance; "
                 "--node sends any of these to one; instances and route need it (--token-file and "
                 "--tls-ca then apply to it)");
  app.add_option("--node", node, "with --controller: the one instance a node command goes to");

  CLI::App* status_cmd = app.add_subcommand(
      "status", "is the daemon up? (exit 0 while it answers, draining or not: a liveness probe)");
  CLI::App* ready_cmd = app.add_subcommand(
      "ready",
      "should engines be sent here? (exit 0 while serving, 1 while draining or down: a "
      "readiness probe)");
  CLI::App* stats_cmd = app.add_subcommand("stats", "per-tier capacity, usage, hits, evictions");
  CLI::App* peers_cmd =
      app.add_subcommand("peers", "peer daemons: link state, bytes in and out, last error");

  SelectorFlags selector_flags;
  std::string algorithm = "xxh3_128", seed = "0";
  bool partial = false;
  CLI::App* lookup_cmd = app.add_subcommand("lookup", "how much of a prompt is cached");
  CLI::App* hash_cmd =
      app.add_subcommand("hash", "print the chunk keys of a prompt (no daemon needed)");
  selector_flags.Register(lookup_cmd, /*with_keys=*/true);
  selector_flags.Register(hash_cmd, /*with_keys=*/false);
  hash_cmd->add_option("--hash-algorithm", algorithm, "xxh3_128|sha256_cbor")
      ->capture_default_str();
  hash_cmd->add_option("--seed", seed, "key protocol seed (vLLM: PYTHONHASHSEED)")
      ->capture_default_str();
  hash_cmd->add_flag("--partial", partial, "also hash the trailing partial chunk");

  bool soft = false;
  uint64_t ttl_ms = 0;
  std::string tier_name, target_name;
  CLI::App* pin_cmd = app.add_subcommand("pin", "keep chunks from eviction");
  CLI::App* unpin_cmd = app.add_subcommand("unpin", "remove hard (or --soft) pins");
  CLI::App* move_cmd = app.add_subcommand(
      "move", "move chunks to another tier of this node, or (--instance) copy them to a peer's");
  CLI::App* clear_cmd = app.add_subcommand(
      "clear",
      "remove chunks: --key/--tokens, --by-layout (with the layout flags), --tenant or --all");
  CLI::App* compress_cmd = app.add_subcommand(
      "compress", "store chunks of a tier (disk, or host) encoded by a codec (--codec), in place");
  CLI::App* decompress_cmd =
      app.add_subcommand("decompress", "store compressed chunks of a tier as they decode");
  for (CLI::App* cmd : {pin_cmd, unpin_cmd, move_cmd, clear_cmd, compress_cmd, decompress_cmd}) {
    selector_flags.Register(cmd, /*with_keys=*/true);
  }
  std::string codec;
  uint32_t group_size = 0, bits = 0, sink_tokens = 0, recent_tokens = 0, heavy_tokens = 0;
  float energy = 0;
  compress_cmd
      ->add_option("--codec", codec,
                   "int8|kivi8|kivi4|kivi2|cachegen|xkv|drop_sink_recent|drop_h2o")
      ->required();
  compress_cmd->add_option("--group-size", group_size,
                           "kivi, cachegen, xkv, drop_*'s block (0: the default)");
  compress_cmd->add_option("--sink-tokens", sink_tokens,
                           "drop_*: tokens kept at a chunk's start (0: one block)");
  compress_cmd->add_option("--recent-tokens", recent_tokens,
                           "drop_*: tokens kept at its end (0: an eighth of it)");
  compress_cmd->add_option("--heavy-tokens", heavy_tokens,
                           "drop_h2o: the heaviest tokens kept besides (0: as --recent-tokens)");
  compress_cmd->add_option("--bits", bits, "cachegen: 2, 4 or 8 (0: the default)");
  compress_cmd->add_option("--energy", energy, "xkv: share of energy kept, (0, 1] (0: 0.99)");
  std::string tenant;
  CLI::Option* compress_tenant = compress_cmd->add_option(
      "--tenant", tenant, "every chunk of the tier this tenant (a tenant salt) stored");
  CLI::Option* decompress_tenant = decompress_cmd->add_option(
      "--tenant", tenant, "every chunk of the tier this tenant (a tenant salt) stored");
  for (CLI::App* cmd : {compress_cmd, decompress_cmd}) {
    cmd->add_option("--tier", tier_name, "tier: disk|host (default disk)");
  }
  for (CLI::App* cmd : {pin_cmd, unpin_cmd}) {
    cmd->add_flag("--soft", soft, "a soft pin (with --ttl-ms) instead of a hard one");
    cmd->add_option("--tier", tier_name, "tier (default host)");
  }
  pin_cmd->add_option("--ttl-ms", ttl_ms, "soft pin duration");
  move_cmd->add_option("--to", target_name, "target tier: device|host|disk|remote")->required();
  std::string instance;
  move_cmd->add_option("--instance", instance,
                       "a peer daemon (node id or address): copy the chunks into its host tier "
                       "(--to host; needs the layout flags)");
  bool clear_all = false, by_layout = false;
  clear_cmd->add_flag("--all", clear_all, "every chunk");
  clear_cmd->add_flag("--by-layout", by_layout, "every chunk of the layout given by the flags");
  clear_cmd->add_option("--tier", tier_name, "tier (default every tier)");
  CLI::Option* clear_tenant = clear_cmd->add_option(
      "--tenant", tenant, "every chunk this tenant (a tenant salt; \"\" for none) stored");

  uint32_t page_size = 100;
  std::string page_token, fingerprint_hex;
  bool all_pages = false;
  CLI::App* ls_cmd = app.add_subcommand("ls", "list cached chunks, a page at a time");
  ls_cmd->add_option("--page-size", page_size, "chunks per page")->capture_default_str();
  ls_cmd->add_option("--page-token", page_token, "continue a listing");
  ls_cmd->add_flag("--all-pages", all_pages, "walk every page");
  ls_cmd->add_option("--layout-fingerprint", fingerprint_hex, "only this layout (16 hex digits)");
  ls_cmd->add_option("--tier", tier_name, "only this tier");
  CLI::Option* ls_tenant =
      ls_cmd->add_option("--tenant", tenant, "only chunks this tenant (a tenant salt) stored");

  CLI::App* drain_cmd =
      app.add_subcommand("drain", "stop admitting new chunks (before a restart) and report");

  CLI::App* instances_cmd =
      app.add_subcommand("instances", "the daemons registered with the controller (--controller)");
  CLI::App* route_cmd = app.add_subcommand(
      "route", "rank candidate instances for a prompt by modelled TTFT (--controller)");
  selector_flags.Register(route_cmd, /*with_keys=*/false);
  std::vector<std::string> candidates;
  route_cmd
      ->add_option("--candidate", candidates,
                   "an instance id, with its queued prefill tokens after '=' (repeatable)")
      ->required();

  uint64_t from_sequence = 0, max_events = 0;
  CLI::App* events_cmd =
      app.add_subcommand("events", "follow KV events (Ctrl-C stops), resumable with --from");
  events_cmd->add_option("--from", from_sequence, "first sequence number (0: from now)")
      ->capture_default_str();
  events_cmd->add_option("--limit", max_events, "stop after this many events (0: follow)")
      ->capture_default_str();

  // Global flags (--addr, --json, --timeout-ms) may also follow the command.
  for (CLI::App* cmd : app.get_subcommands({})) cmd->fallthrough();
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;
  }

  if (*hash_cmd) {
    absl::StatusOr<KvLayout> layout = selector_flags.layout.Build();
    if (!layout.ok()) return Fail(layout.status());
    absl::StatusOr<HashAlgorithm> algo = ParseHashAlgorithm(algorithm);
    if (!algo.ok()) return Fail(algo.status());
    absl::StatusOr<std::vector<uint32_t>> tokens = selector_flags.Tokens();
    if (!tokens.ok()) return Fail(tokens.status());
    absl::StatusOr<KeyHasher> hasher =
        KeyHasher::Create(*layout, {.algorithm = *algo, .seed = seed});
    if (!hasher.ok()) return Fail(hasher.status());
    const std::vector<ChunkKey> keys = hasher->PrefixKeys(
        *tokens, {.tenant_salt = selector_flags.tenant_salt, .lora_name = selector_flags.lora},
        partial ? PartialChunk::kInclude : PartialChunk::kExclude);
    std::vector<uint32_t> counts;
    for (size_t i = 0; i < keys.size(); ++i) {
      counts.push_back(static_cast<uint32_t>(
          std::min<size_t>(layout->chunk_tokens, tokens->size() - i * layout->chunk_tokens)));
    }
    std::cout << FormatHash({.layout = *layout,
                             .algorithm = *algo,
                             .seed = seed,
                             .keys = keys,
                             .chunk_token_counts = counts},
                            json);
    return 0;
  }

  // Tiers are checked here, so a typo is a usage error rather than a round trip.
  v1::Tier tier = v1::TIER_UNSPECIFIED;
  if (!tier_name.empty()) {
    absl::StatusOr<v1::Tier> parsed = ParseTier(tier_name);
    if (!parsed.ok()) return Fail(parsed.status());
    tier = *parsed;
  }
  ConnectOptions connect{.timeout = std::chrono::milliseconds(timeout_ms)};
  if (!token_file.empty()) {
    absl::StatusOr<std::string> token = ReadText(token_file);
    if (!token.ok()) return Fail(token.status());
    connect.bearer_token = *token;
    while (!connect.bearer_token.empty() &&
           std::isspace(static_cast<unsigned char>(connect.bearer_token.back()))) {
      connect.bearer_token.pop_back();
    }
  }
  if (!tls_ca.empty()) {
    absl::StatusOr<std::string> pem = ReadText(tls_ca);
    if (!pem.ok()) return Fail(pem.status());
    connect.tls_ca_pem = *pem;
  }
  if (controller.empty() && (*instances_cmd || *route_cmd)) {
    return Fail(absl::InvalidArgumentError(
        fmt::format("{} asks the controller: give --controller host:port",
                    *instances_cmd ? "instances" : "route")));
  }
  // pin, unpin, move, clear, compress, decompress and stats: one node call, sent to the daemon
  // (--addr) or forwarded by the controller (--controller) to --node, or to every instance.
  std::optional<v1::NodeCall> node_call;
  absl::StatusOr<v1::Tier> move_target = v1::TIER_UNSPECIFIED;
  if (*stats_cmd) node_call.emplace().mutable_stats();
  if (*pin_cmd || *unpin_cmd || *move_cmd || *compress_cmd || *decompress_cmd) {
    // Compress and decompress take --tenant in place of the selector flags.
    const bool by_tenant = compress_tenant->count() + decompress_tenant->count() > 0;
    absl::StatusOr<v1::ChunkSelector> selector =
        by_tenant ? v1::ChunkSelector() : selector_flags.Build();
    if (!selector.ok()) return Fail(selector.status());
    const v1::PinKind kind = soft ? v1::PIN_KIND_SOFT : v1::PIN_KIND_HARD;
    if (*pin_cmd) {
      v1::PinRequest& request = *node_call.emplace().mutable_pin();
      *request.mutable_selector() = *std::move(selector);
      request.set_kind(kind);
      request.set_ttl_ms(ttl_ms);
      request.set_tier(tier);
    } else if (*unpin_cmd) {
      v1::UnpinRequest& request = *node_call.emplace().mutable_unpin();
      *request.mutable_selector() = *std::move(selector);
      request.set_kind(kind);
      request.set_tier(tier);
    } else if (*compress_cmd) {
      v1::CompressRequest& request = *node_call.emplace().mutable_compress();
      *request.mutable_selector() = *std::move(selector);
      if (by_tenant) request.set_tenant(tenant);
      request.set_codec(codec);
      request.set_tier(tier);
      request.mutable_params()->set_group_size(group_size);
      request.mutable_params()->set_bits(bits);
      request.mutable_params()->set_energy(energy);
      request.mutable_params()->set_sink_tokens(sink_tokens);
      request.mutable_params()->set_recent_tokens(recent_tokens);
      request.mutable_params()->set_heavy_tokens(heavy_tokens);
    } else if (*decompress_cmd) {
      v1::DecompressRequest& request = *node_call.emplace().mutable_decompress();
      *request.mutable_selector() = *std::move(selector);
      if (by_tenant) request.set_tenant(tenant);
      request.set_tier(tier);
    } else {
      move_target = ParseTier(target_name);
      if (!move_target.ok()) return Fail(move_target.status());
      v1::MoveRequest& request = *node_call.emplace().mutable_move();
      *request.mutable_selector() = *std::move(selector);
      request.set_target(*move_target);
      request.set_target_instance(instance);
    }
  }
  if (*clear_cmd) {
    v1::ClearRequest& request = *node_call.emplace().mutable_clear();
    request.set_tier(tier);
    if (clear_all) {
      request.set_all(true);
    } else if (clear_tenant->count() > 0) {
      request.set_tenant(tenant);
    } else if (by_layout) {
      absl::StatusOr<KvLayout> layout = selector_flags.layout.Build();
      if (!layout.ok()) return Fail(layout.status());
      *request.mutable_layout() = ToProto(*layout);
    } else {
      absl::StatusOr<v1::ChunkSelector> selector = selector_flags.Build();
      if (!selector.ok()) return Fail(selector.status());
      *request.mutable_selector() = *std::move(selector);
    }
  }
  const auto format_result = [&](const v1::NodeResult& result) {
    return FormatNodeResult(result, *move_target, instance);
  };

  if (!controller.empty()) {
    if (!*lookup_cmd && !*instances_cmd && !*route_cmd && !node_call.has_value()) {
      return Fail(absl::InvalidArgumentError(
          "--controller goes with lookup, instances, route, and (forwarded) stats, pin, unpin, "
          "move, clear, compress and decompress; the other commands ask a daemon (--addr)"));
    }
    absl::StatusOr<ClusterClient> cluster = ClusterClient::Connect(controller, connect);
    if (!cluster.ok()) return Fail(cluster.status());
    if (*instances_cmd) return Print(cluster->ListInstances(), json, FormatInstances);
    if (*stats_cmd && node.empty()) {
      absl::StatusOr<v1::ClusterStatsResponse> stats = cluster->Stats();
      if (!stats.ok()) return Fail(stats.status());
      std::cout << (json ? ToJson(*stats) : FormatClusterStats(*stats));
      // Some instance did not answer: the totals leave it out.
      return stats->answered() == static_cast<uint32_t>(stats->nodes_size()) ? 0 : 1;
    }
    if (node_call.has_value()) {
      node_call->set_instance_id(node);
      absl::StatusOr<v1::NodeCallResponse> forwarded = cluster->Forward(*node_call);
      if (!forwarded.ok()) return Fail(forwarded.status());
      std::cout << (json ? ToJson(*forwarded) : FormatForwarded(*forwarded, format_result));
      // Some instance failed: the command did not do all it was asked.
      for (const v1::NodeResult& result : forwarded->results()) {
        if (result.code() != 0) return 1;
      }
      return 0;
    }
    absl::StatusOr<v1::ChunkSelector> selector = selector_flags.Build();
    if (!selector.ok()) return Fail(selector.status());
    if (*lookup_cmd) {
      return Print(cluster->Lookup(LookupRequestFor(*selector)), json, FormatClusterLookup);
    }
    v1::RouteRequest request;
    *request.mutable_prompt() = LookupRequestFor(*selector);
    request.mutable_prompt()->set_with_keys(false);
    for (const std::string& text : candidates) {
      absl::StatusOr<v1::RouteCandidate> candidate = ParseCandidate(text);
      if (!candidate.ok()) return Fail(candidate.status());
      *request.add_candidates() = *std::move(candidate);
    }
    return Print(cluster->Route(request), json, FormatRoute);
  }
  if (!node.empty()) {
    return Fail(absl::InvalidArgumentError("--node names an instance of --controller's cluster"));
  }
  absl::StatusOr<ControlClient> client = ControlClient::Connect(addr, connect);
  if (!client.ok()) return Fail(client.status());
  if (*status_cmd) return Print(client->Health(), json, FormatHealth);
  if (*ready_cmd) {
    absl::StatusOr<v1::HealthResponse> health = client->Health();
    const int printed = Print(health, json, FormatHealth);
    if (printed != 0) return printed;
    return health->status() == v1::HealthResponse::SERVING_STATUS_SERVING ? 0 : 1;
  }
  if (*peers_cmd) return Print(client->ListPeers(), json, FormatPeers);
  if (*drain_cmd) return Print(client->Drain(), json, FormatDrain);
  if (node_call.has_value()) {
    absl::StatusOr<v1::NodeResult> result = client->Send(*node_call);
    if (!result.ok()) return Fail(result.status());
    std::cout << (json ? ToJson(NodeResponse(*result)) : format_result(*result));
    return 0;
  }
  if (*lookup_cmd) {
    absl::StatusOr<v1::ChunkSelector> selector = selector_flags.Build();
    if (!selector.ok()) return Fail(selector.status());
    return Print(client->Lookup(LookupRequestFor(*selector)), json, FormatLookup);
  }
  if (*ls_cmd) {
    v1::ListChunksRequest request;
    request.set_page_size(page_size);
    request.set_page_token(page_token);
    request.set_tier(tier);
    if (ls_tenant->count() > 0) request.set_tenant(tenant);
    if (!fingerprint_hex.empty()) {
      uint64_t fingerprint = 0;
      const char* end = fingerprint_hex.data() + fingerprint_hex.size();
      auto [ptr, ec] = std::from_chars(fingerprint_hex.data(), end, fingerprint, 16);
      if (ec != std::errc() || ptr != end) {
        return Fail(absl::InvalidArgumentError(
            fmt::format("--layout-fingerprint '{}' is not hexadecimal", fingerprint_hex)));
      }
      request.set_layout_fingerprint(fingerprint);
    }
    do {
      absl::StatusOr<v1::ListChunksResponse> page = client->ListChunks(request);
      if (int code = Print(page, json, FormatChunks); code != 0) return code;
      request.set_page_token(page->next_page_token());
    } while (all_pages && !request.page_token().empty());
    return 0;
  }
  if (*events_cmd) {
    uint64_t seen = 0;
    absl::Status status = client->WatchEvents(from_sequence, [&](const v1::ChunkEvent& event) {
      std::cout << (json ? ToJson(event) : FormatEvent(event)) << std::flush;
      return max_events == 0 || ++seen < max_events;
    });
    return status.ok() ? 0 : Fail(status);
  }
  return 2;
}

}  // namespace
}  // namespace strata::cli

int main(int argc, char** argv) { return strata::cli::Run(argc, argv); }
