#include "controller/ingest/vllm_key_translator.h"

#include <algorithm>
#include <cstring>

#include "absl/strings/ascii.h"

namespace strata::controller {
namespace {

uint8_t TierBit(Tier tier) { return static_cast<uint8_t>(1u << static_cast<unsigned>(tier)); }

}  // namespace

std::optional<Tier> VllmMediumTier(std::string_view medium) {
  std::string name(medium);
  absl::AsciiStrToUpper(&name);
  if (name.empty() || name == "GPU" || name == "CUDA") return Tier::kDevice;
  if (name == "CPU") return Tier::kHost;
  if (name == "DISK") return Tier::kDisk;
  return std::nullopt;
}

void VllmKeyTranslator::Translate(const VllmEventBatch& batch, std::vector<ChunkEvent>& out) {
  for (const VllmEvent& event : batch.events) {
    if (const auto* stored = std::get_if<VllmBlockStored>(&event)) {
      Stored(*stored, out);
    } else if (const auto* removed = std::get_if<VllmBlockRemoved>(&event)) {
      Removed(*removed, out);
    } else {
      ++stats_.clears;
      blocks_.clear();
      out.push_back({.kind = ChunkEventKind::kCleared});
    }
  }
}

void VllmKeyTranslator::Stored(const VllmBlockStored& event, std::vector<ChunkEvent>& out) {
  const size_t count = event.block_hashes.size();
  const std::optional<Tier> tier = VllmMediumTier(event.medium);
  if (!tier || event.block_size != hasher_.chunk_tokens() || event.group_idx != 0 ||
      event.has_extra_keys || (event.has_lora_id && !event.lora_name)) {
    stats_.unkeyable += count;
    return;
  }
  ChunkKey parent;  // empty: the prompt's first chunk
  if (event.parent) {
    auto it = blocks_.find(*event.parent);
    if (it == blocks_.end()) {
      stats_.unknown_parent += count;
      return;
    }
    parent = it->second.key;
  }
  KeyExtras extras;
  if (event.lora_name) extras.lora_name = *event.lora_name;
  const std::span<const uint32_t> tokens(event.token_ids);
  for (size_t i = 0; i < count; ++i) {
    const ChunkKey key = hasher_.NextPrefixKey(
        parent, tokens.subspan(i * event.block_size, event.block_size), extras);
    if (!Matches(event.block_hashes[i], key)) {
      stats_.hash_mismatches += count - i;
      return;
    }
    Block& block = blocks_[event.block_hashes[i]];
    block.key = key;
    block.tiers |= TierBit(*tier);
    out.push_back({.kind = ChunkEventKind::kStored, .tier = *tier, .key = key});
    ++stats_.stored_blocks;
    parent = key;
  }
}

void VllmKeyTranslator::Removed(const VllmBlockRemoved& event, std::vector<ChunkEvent>& out) {
  const std::optional<Tier> tier = VllmMediumTier(event.medium);
  if (!tier) {
    stats_.unkeyable += event.block_hashes.size();
    return;
  }
  for (const EngineBlockHash& hash : event.block_hashes) {
    auto it = blocks_.find(hash);
    if (it == blocks_.end()) continue;
    out.push_back({.kind = ChunkEventKind::kRemoved, .tier = *tier, .key = it->second.key});
    ++stats_.removed_blocks;
    it->second.tiers &= static_cast<uint8_t>(~TierBit(*tier));
    if (it->second.tiers == 0) blocks_.erase(it);
  }
}

bool VllmKeyTranslator::Matches(const EngineBlockHash& hash, const ChunkKey& key) const {
  if (hasher_.algorithm() != HashAlgorithm::kSha256Cbor) return true;  // nothing to compare
  const std::span<const uint8_t> digest = key.digest();
  if (hash.front() == 'i') {
    uint64_t id = 0;
    for (size_t i = 1; i < hash.size(); ++i) id = (id << 8) | static_cast<uint8_t>(hash[i]);
    return id == key.EventId();
  }
  return hash.size() - 1 == digest.size() &&
         std::memcmp(hash.data() + 1, digest.data(), digest.size()) == 0;
}

}  // namespace strata::controller
