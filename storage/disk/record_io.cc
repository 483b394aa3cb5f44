#include "storage/disk/record_io.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <vector>

#include "core/status_macros.h"
#include "core/status_util.h"
#include "fmt/format.h"
#include "storage/disk/record_format.h"
#include "storage/host/payload_view.h"
#include "storage/io/aligned_buffer.h"

namespace strata::storage {
namespace {

template <typename Parts>
bool DirectCapableImpl(Parts parts) {
  for (size_t i = 0; i < parts.size(); ++i) {
    if (!IsAligned(parts[i].data())) return false;
    if (i + 1 < parts.size() && parts[i].size() % kIoAlignment != 0) return false;
  }
  return true;
}

// Appends requests covering [data, data + size) at file `offset`, split at max_io_bytes.
void AddPieces(std::vector<IoRequest>& requests, IoOp op, int fd, uint64_t offset, std::byte* data,
               uint64_t size, uint32_t max_io_bytes) {
  for (uint64_t done = 0; done < size;) {
    const auto n = static_cast<uint32_t>(std::min<uint64_t>(max_io_bytes, size - done));
    requests.push_back(
        {.op = op, .fd = fd, .offset = offset + done, .data = data + done, .size_bytes = n});
    done += n;
  }
}

// The first failed request of `requests` as a status, given their results.
absl::Status FirstFailure(std::span<const IoRequest> requests, std::span<const int64_t> results,
                          IoOp op) {
  for (size_t i = 0; i < results.size(); ++i) {
    const IoRequest& request = requests[i];
    const std::string where =
        fmt::format("{} fd {} offset {} ({} bytes)", op == IoOp::kWrite ? "write" : "read",
                    request.fd, request.offset, request.size_bytes);
    if (results[i] < 0) {
      const int error_number = static_cast<int>(-results[i]);
      if (op == IoOp::kRead) {
        return absl::DataLossError(fmt::format("{}: {}", where, std::strerror(error_number)));
      }
      if (error_number == ENOSPC || error_number == EDQUOT) {
        return ErrnoToStatus(error_number, where);
      }
      return absl::UnavailableError(fmt::format("{}: {}", where, std::strerror(error_number)));
    }
    if (results[i] != request.size_bytes) {
      const std::string message = fmt::format("{}: short transfer of {} bytes", where, results[i]);
      return op == IoOp::kRead ? absl::DataLossError(message)
                               : absl::ResourceExhaustedError(message);
    }
  }
  return absl::OkStatus();
}

}  // namespace

bool DirectCapable(ConstParts parts) { return DirectCapableImpl(parts); }
bool DirectCapable(MutableParts parts) { return DirectCapableImpl(parts); }

uint64_t PartsBytes(ConstParts parts) {
  uint64_t total = 0;
  for (const auto& part : parts) total += part.size();
  return total;
}

uint64_t PartsBytes(MutableParts parts) {
  uint64_t total = 0;
  for (const auto& part : parts) total += part.size();
  return total;
}

absl::Status WriteRecord(IoEngine& engine, int fd, uint64_t offset,
                         std::span<const std::byte> header_block, ConstParts payload,
                         uint32_t max_io_bytes) {
  const RecordWrite record[] = {
      {.fd = fd, .offset = offset, .header_block = header_block, .payload = payload}};
  return WriteRecords(engine, record, max_io_bytes).front();
}

std::vector<absl::Status> WriteRecords(IoEngine& engine, std::span<const RecordWrite> records,
                                       uint32_t max_io_bytes) {
  std::vector<IoRequest> requests;
  std::vector<size_t> first_request;  // per record, then one past the last request
  // The last partial block (direct) or the whole payload (staged) of each record.
  std::vector<AlignedBuffer> bounces;
  for (const RecordWrite& record : records) {
    first_request.push_back(requests.size());
    const uint64_t payload_bytes = PartsBytes(record.payload);
    const int fd = record.fd;
    requests.push_back({.op = IoOp::kWrite,
                        .fd = fd,
                        .offset = record.offset,
                        .data = const_cast<std::byte*>(record.header_block.data()),
                        .size_bytes = static_cast<uint32_t>(kRecordHeaderBytes)});
    const uint64_t payload_offset = record.offset + kRecordHeaderBytes;
    if (DirectCapable(record.payload)) {
      uint64_t at = 0;
      for (const auto& part : record.payload) {
        AddPieces(requests, IoOp::kWrite, fd, payload_offset + at,
                  const_cast<std::byte*>(part.data()), AlignDown(part.size()), max_io_bytes);
        at += AlignDown(part.size());
      }
      if (at < payload_bytes) {
        const auto& last = record.payload.back();
        AlignedBuffer& bounce = bounces.emplace_back(kIoAlignment);
        std::memcpy(bounce.data(), last.data() + AlignDown(last.size()), payload_bytes - at);
        AddPieces(requests, IoOp::kWrite, fd, payload_offset + at, bounce.data(), kIoAlignment,
                  max_io_bytes);
      }
    } else {
      AlignedBuffer& bounce = bounces.emplace_back(payload_bytes);
      uint64_t at = 0;
      for (const auto& part : record.payload) {
        std::memcpy(bounce.data() + at, part.data(), part.size());
        at += part.size();
      }
      AddPieces(requests, IoOp::kWrite, fd, payload_offset, bounce.data(), bounce.size(),
                max_io_bytes);
    }
  }
  first_request.push_back(requests.size());
  absl::StatusOr<std::vector<int64_t>> results = RunToCompletion(engine, requests);
  std::vector<absl::Status> statuses;
  statuses.reserve(records.size());
  for (size_t i = 0; i < records.size(); ++i) {
    if (!results.ok()) {
      statuses.push_back(results.status());
      continue;
    }
    const size_t begin = first_request[i];
    const size_t count = first_request[i + 1] - begin;
    statuses.push_back(FirstFailure(std::span(requests).subspan(begin, count),
                                    std::span<const int64_t>(*results).subspan(begin, count),
                                    IoOp::kWrite));
  }
  return statuses;
}

absl::StatusOr<uint64_t> ReadPayload(IoEngine& engine, int fd, uint64_t payload_offset,
                                     MutableParts payload, uint32_t max_io_bytes) {
  const PayloadRead read[] = {{.fd = fd, .payload_offset = payload_offset, .payload = payload}};
  return std::move(ReadPayloads(engine, read, max_io_bytes).front());
}

std::vector<absl::StatusOr<uint64_t>> ReadPayloads(IoEngine& engine,
                                                   std::span<const PayloadRead> reads,
                                                   uint32_t max_io_bytes) {
  // Per payload: where its requests start, its bounce buffer (the last partial block when
  // direct, else the whole payload), and its running checksum.
  struct Progress {
    size_t first_request = 0;
    uint64_t payload_bytes = 0;
    bool direct = false;
    uint64_t direct_bytes = 0;
    AlignedBuffer bounce;
    ChecksumStream checksum;
    bool intact = true;
  };
  std::vector<IoRequest> requests;
  std::vector<size_t> owner;  // request -> payload
  std::vector<Progress> progress(reads.size());
  for (size_t r = 0; r < reads.size(); ++r) {
    const PayloadRead& read = reads[r];
    Progress& p = progress[r];
    p.first_request = requests.size();
    p.payload_bytes = PartsBytes(read.payload);
    p.direct = DirectCapable(read.payload);
    if (p.direct) {
      for (const auto& part : read.payload) {
        AddPieces(requests, IoOp::kRead, read.fd, read.payload_offset + p.direct_bytes, part.data(),
                  AlignDown(part.size()), max_io_bytes);
        p.direct_bytes += AlignDown(part.size());
      }
      if (p.direct_bytes < p.payload_bytes) {
        p.bounce = AlignedBuffer(kIoAlignment);
        AddPieces(requests, IoOp::kRead, read.fd, read.payload_offset + p.direct_bytes,
                  p.bounce.data(), kIoAlignment, max_io_bytes);
      }
    } else {
      p.bounce = AlignedBuffer(p.payload_bytes);
      AddPieces(requests, IoOp::kRead, read.fd, read.payload_offset, p.bounce.data(),
                p.bounce.size(), max_io_bytes);
    }
    owner.resize(requests.size(), r);
  }
  // Checksum each finished prefix of a payload while later requests are still in flight.
  absl::StatusOr<std::vector<int64_t>> results =
      RunToCompletion(engine, requests, [&](size_t i, int64_t result) {
        const IoRequest& request = requests[i];
        Progress& p = progress[owner[i]];
        p.intact = p.intact && result == request.size_bytes;
        if (!p.intact) return;
        const uint64_t at = request.offset - reads[owner[i]].payload_offset;
        p.checksum.Update({request.data, static_cast<size_t>(std::min<uint64_t>(
                                             request.size_bytes, p.payload_bytes - at))});
      });
  std::vector<absl::StatusOr<uint64_t>> digests;
  digests.reserve(reads.size());
  for (size_t r = 0; r < reads.size(); ++r) {
    if (!results.ok()) {
      digests.push_back(results.status());
      continue;
    }
    Progress& p = progress[r];
    const size_t end = r + 1 < reads.size() ? progress[r + 1].first_request : requests.size();
    const size_t count = end - p.first_request;
    if (absl::Status failure = FirstFailure(
            std::span(requests).subspan(p.first_request, count),
            std::span<const int64_t>(*results).subspan(p.first_request, count), IoOp::kRead);
        !failure.ok()) {
      digests.push_back(failure);
      continue;
    }
    const MutableParts payload = reads[r].payload;
    if (p.direct) {
      if (p.direct_bytes < p.payload_bytes) {
        const auto& last = payload.back();
        std::memcpy(last.data() + AlignDown(last.size()), p.bounce.data(),
                    p.payload_bytes - p.direct_bytes);
      }
    } else {
      uint64_t at = 0;
      for (const auto& part : payload) {
        std::memcpy(part.data(), p.bounce.data() + at, part.size());
        at += part.size();
      }
    }
    digests.push_back(p.checksum.Digest());
  }
  return digests;
}

}  // namespace strata::storage
