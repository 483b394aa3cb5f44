#include "bench/trace/trace_command.h"

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <iostream>
#include <thread>

#include "bench/trace/belady.h"
#include "bench/trace/synthetic_traces.h"
#include "bench/trace/trace_replay.h"
#include "core/byte_size.h"
#include "core/fmt_absl.h"
#include "fmt/format.h"
#include "storage/policy/eviction_policy.h"

namespace strata::bench {
namespace {

constexpr uint64_t kBlockBytes = 4096;  // the replay layout's chunk size (trace_replay.cc)

struct Capacity {
  std::string label;
  double fraction = 0;  // of unique blocks
  uint64_t blocks = 0;
};

absl::StatusOr<Trace> LoadWorkload(const TraceCommandOptions& o) {
  if (o.workload == "mrqa") return MakeMrqaTrace({});
  if (o.workload == "rag") return MakeRagTrace({});
  if (o.workload != "conversation") {
    return absl::InvalidArgumentError(
        fmt::format("unknown workload '{}' (conversation, mrqa, rag)", o.workload));
  }
  absl::StatusOr<Trace> trace = LoadTrace(o.trace_file);
  if (trace.ok()) trace->name = "conversation";
  return trace;
}

absl::StatusOr<Capacity> ParseCapacity(const std::string& text, uint64_t unique_blocks) {
  Capacity capacity{.label = text};
  if (!text.empty() && text.back() == '%') {
    double percent = 0;
    if (std::sscanf(text.c_str(), "%lf%%", &percent) != 1 || percent <= 0 || percent > 100) {
      return absl::InvalidArgumentError(fmt::format("bad capacity '{}'", text));
    }
    capacity.fraction = percent / 100;
    capacity.blocks = static_cast<uint64_t>(capacity.fraction * unique_blocks);
  } else {
    absl::StatusOr<uint64_t> bytes = ParseByteSize(text);
    if (!bytes.ok()) return bytes.status();
    capacity.blocks = *bytes / kBlockBytes;
    capacity.fraction = static_cast<double>(capacity.blocks) / unique_blocks;
  }
  if (capacity.blocks == 0) {
    return absl::InvalidArgumentError(fmt::format("capacity '{}' holds no block", text));
  }
  return capacity;
}

std::string ResultJson(const ReplayResult& r) {
  return fmt::format(
      R"({{"hit_ratio": {:.4f}, "hit_blocks": {}, "bytes_written": {}, "bytes_read": {}, )"
      R"("evictions": {}, "rejected_stores": {}, "wrong_payloads": {}, "seconds": {:.2f}}})",
      r.hit_ratio(), r.hit_blocks, r.bytes_written, r.bytes_read, r.evictions, r.rejected_stores,
      r.wrong_payloads, r.seconds);
}

}  // namespace

int RunTraceCommand(const TraceCommandOptions& o) {
  absl::StatusOr<Trace> trace = LoadWorkload(o);
  if (!trace.ok()) {
    std::cerr << "strata-bench trace: " << trace.status() << "\n";
    return 1;
  }
  const uint64_t unique = trace->unique_blocks();
  std::vector<Capacity> capacities;
  for (const std::string& text : o.capacities) {
    absl::StatusOr<Capacity> capacity = ParseCapacity(text, unique);
    if (!capacity.ok()) {
      std::cerr << "strata-bench trace: " << capacity.status() << "\n";
      return 1;
    }
    capacities.push_back(*capacity);
  }
  std::vector<std::string> policies = o.policies;
  if (policies.empty()) {
    for (std::string_view name : storage::EvictionPolicyNames()) policies.emplace_back(name);
  }

  // Every (policy, capacity) replay, plus Belady per capacity, spread over the threads.
  std::vector<std::vector<ReplayResult>> results(policies.size(),
                                                 std::vector<ReplayResult>(capacities.size()));
  std::vector<double> belady(capacities.size());
  std::vector<absl::Status> errors(policies.size() * capacities.size());
  const size_t jobs = (policies.size() + 1) * capacities.size();
  std::atomic<size_t> next{0};
  auto work = [&] {
    for (size_t job; (job = next.fetch_add(1)) < jobs;) {
      const size_t p = job / capacities.size(), c = job % capacities.size();
      if (p == policies.size()) {
        belady[c] = BeladyHitRatio(*trace, capacities[c].blocks);
        continue;
      }
      absl::StatusOr<ReplayResult> result = ReplayOnHostTier(
          *trace, {.policy = policies[p], .capacity_blocks = capacities[c].blocks});
      if (result.ok()) {
        results[p][c] = *result;
      } else {
        errors[job] = result.status();
      }
    }
  };
  std::vector<std::thread> threads;
  for (unsigned t = 0; t < std::max(1u, o.threads); ++t) threads.emplace_back(work);
  for (std::thread& thread : threads) thread.join();
  for (const absl::Status& error : errors) {
    if (!error.ok()) {
      std::cerr << "strata-bench trace: " << error << "\n";
      return 1;
    }
  }

  uint64_t wrong = 0;
  std::string out = fmt::format(
      "{{\n  \"workload\": \"{}\", \"requests\": {}, \"total_blocks\": {}, \"unique_blocks\": {},\n"
      "  \"block_bytes\": {},\n  \"capacities\": [",
      trace->name, trace->requests.size(), trace->total_blocks(), unique, kBlockBytes);
  for (size_t c = 0; c < capacities.size(); ++c) {
    out +=
        fmt::format("{}{{\"label\": \"{}\", \"fraction\": {:.4f}, \"blocks\": {}}}", c ? ", " : "",
                    capacities[c].label, capacities[c].fraction, capacities[c].blocks);
  }
  out += "],\n  \"belady_block_hit_ratio\": [";
  for (size_t c = 0; c < capacities.size(); ++c)
    out += fmt::format("{}{:.4f}", c ? ", " : "", belady[c]);
  out += "],\n  \"policies\": {\n";
  for (size_t p = 0; p < policies.size(); ++p) {
    out += fmt::format("    \"{}\": [\n", policies[p]);
    for (size_t c = 0; c < capacities.size(); ++c) {
      wrong += results[p][c].wrong_payloads;
      out += fmt::format("      {}{}\n", ResultJson(results[p][c]),
                         c + 1 < capacities.size() ? "," : "");
    }
    out += fmt::format("    ]{}\n", p + 1 < policies.size() ? "," : "");
  }
  out += "  }";
  // The default against the better of LRU and ARC, in points (hundredths of hit ratio).
  auto index_of = [&](std::string_view name) {
    return static_cast<size_t>(std::find(policies.begin(), policies.end(), name) -
                               policies.begin());
  };
  const size_t def = index_of(storage::kDefaultEvictionPolicy), lru = index_of("lru"),
               arc = index_of("arc");
  if (def < policies.size() && lru < policies.size() && arc < policies.size()) {
    out += fmt::format(",\n  \"default\": \"{}\",\n  \"default_minus_best_of_lru_arc_points\": [",
                       storage::kDefaultEvictionPolicy);
    for (size_t c = 0; c < capacities.size(); ++c) {
      const double best = std::max(results[lru][c].hit_ratio(), results[arc][c].hit_ratio());
      out += fmt::format("{}{:.2f}", c ? ", " : "", 100 * (results[def][c].hit_ratio() - best));
    }
    out += "]";
  }
  out += "\n}\n";
  std::cout << out;

  std::cerr << fmt::format("{:<14}", "capacity");
  for (const Capacity& capacity : capacities) std::cerr << fmt::format("{:>9}", capacity.label);
  std::cerr << "\n";
  for (size_t p = 0; p < policies.size(); ++p) {
    std::cerr << fmt::format("{:<14}", policies[p]);
    for (const ReplayResult& r : results[p]) std::cerr << fmt::format("{:>9.3f}", r.hit_ratio());
    std::cerr << "\n";
  }
  std::cerr << fmt::format("{:<14}", "belady");
  for (double b : belady) std::cerr << fmt::format("{:>9.3f}", b);
  std::cerr << "\n";
  return wrong == 0 ? 0 : 3;
}

}  // namespace strata::bench
