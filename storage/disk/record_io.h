// Moving one record between memory and a segment file through an IoEngine, with O_DIRECT's
// alignment rules handled here:
//  - direct: when every buffer starts on a kIoAlignment boundary and every buffer but the last
//    is a multiple of it long, the payload is transferred straight from / into the caller's
//    buffers; only the last partial block (< 4 KiB) goes through a small bounce block;
//  - staged: otherwise the payload goes through one aligned staging buffer (one extra copy).
// Transfers are split into requests of at most `max_io_bytes` and kept queue_depth deep.
// Thread-compatible: the engine is the caller's for the duration of the call.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "storage/io/io_engine.h"

namespace strata::storage {

using ConstParts = std::span<const std::span<const std::byte>>;
using MutableParts = std::span<const std::span<std::byte>>;

// True when the parts can be transferred in place (the direct case above).
bool DirectCapable(ConstParts parts);
bool DirectCapable(MutableParts parts);

// Sum of the parts' sizes.
uint64_t PartsBytes(ConstParts parts);
uint64_t PartsBytes(MutableParts parts);

// Writes the header block (kRecordHeaderBytes, aligned) and then the payload, zero-padded to the
// alignment, at `offset` of `fd`. Errors: ENOSPC or a short write -> kResourceExhausted; other
// errno -> kUnavailable; the bytes at the record's place are then unspecified.
absl::Status WriteRecord(IoEngine& engine, int fd, uint64_t offset,
                         std::span<const std::byte> header_block, ConstParts payload,
                         uint32_t max_io_bytes);

// One record for WriteRecords: what WriteRecord takes.
struct RecordWrite {
  int fd = -1;
  uint64_t offset = 0;
  std::span<const std::byte> header_block;
  ConstParts payload;
};

// Writes several records as WriteRecord does, with their requests kept queue_depth deep across
// record boundaries (the device never idles between records). Returns one status per record,
// with WriteRecord's codes; an engine failure fails every record. Staged payloads are copied
// into staging buffers that all live until the call returns.
std::vector<absl::Status> WriteRecords(IoEngine& engine, std::span<const RecordWrite> records,
                                       uint32_t max_io_bytes);

// Reads PartsBytes(payload) bytes of payload starting at `payload_offset` of `fd` into the parts
// and returns their xxh3-64. Any errno or short read -> kDataLoss; the parts then hold
// unspecified bytes.
absl::StatusOr<uint64_t> ReadPayload(IoEngine& engine, int fd, uint64_t payload_offset,
                                     MutableParts payload, uint32_t max_io_bytes);

// One payload for ReadPayloads: what ReadPayload takes.
struct PayloadRead {
  int fd = -1;
  uint64_t payload_offset = 0;
  MutableParts payload;
};

// Reads several payloads as ReadPayload does, with their requests kept queue_depth deep across
// payload boundaries (the device never idles between payloads), each checksummed as its bytes
// arrive. Returns one result per payload, with ReadPayload's codes; an engine failure fails
// every payload.
std::vector<absl::StatusOr<uint64_t>> ReadPayloads(IoEngine& engine,
                                                   std::span<const PayloadRead> reads,
                                                   uint32_t max_io_bytes);

}  // namespace strata::storage
