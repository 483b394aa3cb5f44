// strata: the operator's CLI for a Strata daemon.
//   strata status | stats | lookup | hash   (strata --help, strata <command> --help)
// Exit codes: 0 success, 1 the daemon answered with an error or could not be reached, 2 usage.
#include <charconv>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <sstream>

#include "CLI/CLI.hpp"
#include "cli/control_client.h"
#include "cli/format.h"
#include "core/fmt_absl.h"
#include "core/key_hasher.h"
#include "fmt/format.h"
#include "proto/convert.h"

namespace strata::cli {
namespace {

struct LayoutFlags {
  std::string model = "model";
  std::string kind = "mha";
  uint32_t layers = 32;
  uint32_t kv_heads = 8;
  uint32_t head_dim = 128;
  std::string dtype = "bf16";
  uint32_t tp_rank = 0;
  uint32_t tp_size = 1;
  std::string positional = "rope";
  uint32_t chunk_tokens = KvLayout::kDefaultChunkTokens;

  void Register(CLI::App* app) {
    app->add_option("--model", model, "model id")->capture_default_str();
    app->add_option("--kind", kind, "mha|mla")->capture_default_str();
    app->add_option("--layers", layers, "layers")->capture_default_str();
    app->add_option("--kv-heads", kv_heads, "KV heads of this TP rank")->capture_default_str();
    app->add_option("--head-dim", head_dim, "head dimension")->capture_default_str();
    app->add_option("--dtype", dtype, "fp16|bf16|fp32|fp8_e4m3|int8")->capture_default_str();
    app->add_option("--tp-rank", tp_rank, "TP rank")->capture_default_str();
    app->add_option("--tp-size", tp_size, "TP world size")->capture_default_str();
    app->add_option("--positional", positional, "rope|nope")->capture_default_str();
    app->add_option("--chunk-tokens", chunk_tokens, "tokens per chunk")->capture_default_str();
  }

  absl::StatusOr<KvLayout> Build() const {
    KvLayout layout;
    layout.model_id = model;
    if (kind == "mha") {
      layout.kind = KvKind::kMha;
    } else if (kind == "mla") {
      layout.kind = KvKind::kMlaLatent;
    } else {
      return absl::InvalidArgumentError(fmt::format("--kind '{}' is not mha or mla", kind));
    }
    static constexpr std::pair<std::string_view, KvDtype> kDtypes[] = {
        {"fp16", KvDtype::kFloat16},
        {"bf16", KvDtype::kBfloat16},
        {"fp32", KvDtype::kFloat32},
        {"fp8_e4m3", KvDtype::kFp8E4m3},
        {"int8", KvDtype::kInt8}};
    bool known = false;
    for (const auto& [name, value] : kDtypes) {
      if (dtype == name) {
        layout.dtype = value;
        known = true;
      }
    }
    if (!known) return absl::InvalidArgumentError(fmt::format("--dtype '{}' is unknown", dtype));
    if (positional != "rope" && positional != "nope") {
      return absl::InvalidArgumentError(
          fmt::format("--positional '{}' is not rope or nope", positional));
    }
    layout.positional =
        positional == "rope" ? PositionalFormat::kRopeApplied : PositionalFormat::kNope;
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

absl::StatusOr<std::vector<uint32_t>> ReadTokens(const std::string& inline_tokens,
                                                 const std::string& file) {
  if (!file.empty()) {
    std::ifstream in(file);
    if (!in) return absl::InvalidArgumentError(fmt::format("cannot read '{}'", file));
    std::stringstream text;
    text << in.rdbuf();
    return ParseTokens(text.str());
  }
  return ParseTokens(inline_tokens);
}

int Fail(const absl::Status& status) {
  std::cerr << "strata: " << fmt::format("{}", status) << "\n";
  return status.code() == absl::StatusCode::kInvalidArgument ? 2 : 1;
}

int Run(int argc, char** argv) {
  CLI::App app{"strata: operate a Strata KV-cache daemon"};
  app.require_subcommand(1);
  std::string addr = "127.0.0.1:50051";
  bool json = false;
  uint32_t timeout_ms = 5000;
  app.add_option("--addr", addr, "daemon control address: host:port or unix:///path")
      ->capture_default_str();
  app.add_flag("--json", json, "machine-readable output");
  app.add_option("--timeout-ms", timeout_ms, "deadline of each call")->capture_default_str();

  CLI::App* status_cmd = app.add_subcommand("status", "is the daemon serving?");
  CLI::App* stats_cmd = app.add_subcommand("stats", "per-tier capacity, usage, hits, evictions");

  LayoutFlags layout_flags;
  std::string tokens_text, tokens_file, tenant_salt, lora, algorithm = "xxh3_128", seed = "0";
  bool partial = false;
  CLI::App* lookup_cmd = app.add_subcommand("lookup", "how much of a prompt is cached");
  CLI::App* hash_cmd =
      app.add_subcommand("hash", "print the chunk keys of a prompt (no daemon needed)");
  for (CLI::App* cmd : {lookup_cmd, hash_cmd}) {
    layout_flags.Register(cmd);
    cmd->add_option("--tokens", tokens_text, "token ids, e.g. 1,2,3");
    cmd->add_option("--tokens-file", tokens_file, "file of token ids");
    cmd->add_option("--tenant-salt", tenant_salt, "tenant salt");
    cmd->add_option("--lora", lora, "LoRA adapter name");
  }
  hash_cmd->add_option("--hash-algorithm", algorithm, "xxh3_128|sha256_cbor")
      ->capture_default_str();
  hash_cmd->add_option("--seed", seed, "key protocol seed (vLLM: PYTHONHASHSEED)")
      ->capture_default_str();
  hash_cmd->add_flag("--partial", partial, "also hash the trailing partial chunk");

  // Global flags (--addr, --json, --timeout-ms) may also follow the command.
  for (CLI::App* cmd : {status_cmd, stats_cmd, lookup_cmd, hash_cmd}) cmd->fallthrough();
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;
  }

  if (*hash_cmd) {
    absl::StatusOr<KvLayout> layout = layout_flags.Build();
    if (!layout.ok()) return Fail(layout.status());
    absl::StatusOr<HashAlgorithm> algo = ParseHashAlgorithm(algorithm);
    if (!algo.ok()) return Fail(algo.status());
    absl::StatusOr<std::vector<uint32_t>> tokens = ReadTokens(tokens_text, tokens_file);
    if (!tokens.ok()) return Fail(tokens.status());
    absl::StatusOr<KeyHasher> hasher =
        KeyHasher::Create(*layout, {.algorithm = *algo, .seed = seed});
    if (!hasher.ok()) return Fail(hasher.status());
    const std::vector<ChunkKey> keys =
        hasher->PrefixKeys(*tokens, {.tenant_salt = tenant_salt, .lora_name = lora},
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

  absl::StatusOr<ControlClient> client =
      ControlClient::Connect(addr, std::chrono::milliseconds(timeout_ms));
  if (!client.ok()) return Fail(client.status());
  if (*status_cmd) {
    absl::StatusOr<v1::HealthResponse> health = client->Health();
    if (!health.ok()) return Fail(health.status());
    std::cout << (json ? ToJson(*health) : FormatHealth(*health));
    return 0;
  }
  if (*stats_cmd) {
    absl::StatusOr<v1::StatsResponse> stats = client->Stats();
    if (!stats.ok()) return Fail(stats.status());
    std::cout << (json ? ToJson(*stats) : FormatStats(*stats));
    return 0;
  }
  if (*lookup_cmd) {
    absl::StatusOr<KvLayout> layout = layout_flags.Build();
    if (!layout.ok()) return Fail(layout.status());
    absl::StatusOr<std::vector<uint32_t>> tokens = ReadTokens(tokens_text, tokens_file);
    if (!tokens.ok()) return Fail(tokens.status());
    v1::LookupRequest request;
    *request.mutable_layout() = ToProto(*layout);
    for (uint32_t t : *tokens) request.add_tokens(t);
    request.set_tenant_salt(tenant_salt);
    request.set_lora_name(lora);
    request.set_with_keys(true);
    absl::StatusOr<v1::LookupResponse> lookup = client->Lookup(request);
    if (!lookup.ok()) return Fail(lookup.status());
    std::cout << (json ? ToJson(*lookup) : FormatLookup(*lookup));
    return 0;
  }
  return 2;
}

}  // namespace
}  // namespace strata::cli

int main(int argc, char** argv) { return strata::cli::Run(argc, argv); }
