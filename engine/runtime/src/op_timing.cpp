#include "coli/runtime/op_timing.h"

#include <algorithm>
#include <cstdio>

namespace coli::runtime {

std::string_view op_name(Op op) {
  switch (op) {
    case Op::attention_qkv: return "attention q/k/v projections";
    case Op::attention_core: return "attention core (KV cache)";
    case Op::attention_output: return "attention output projection";
    case Op::norm_rope: return "norms and rope";
    case Op::router: return "router";
    case Op::experts: return "experts (compute)";
    case Op::expert_io_wait: return "expert I/O wait";
    case Op::dense_mlp: return "dense MLP / shared expert";
    case Op::lm_head: return "lm_head";
    case Op::other: return "other";
  }
  return "?";
}

double OpTimes::seconds(Op op) const {
  if (op != Op::other) return seconds_[static_cast<std::size_t>(op)];
  double claimed = 0;
  for (std::size_t i = 0; i + 1 < kOpCount; ++i) claimed += seconds_[i];
  // Time the call sites put in "other" themselves, plus what no phase claimed.
  return seconds_[static_cast<std::size_t>(Op::other)] + std::max(0.0, pass_seconds_ - claimed - seconds_[kOpCount - 1]);
}

std::string op_times_table(const OpTimes& times, std::string_view title) {
  std::string out;
  char line[160];
  const double per_token = times.tokens() > 0 ? 1e3 / static_cast<double>(times.tokens()) : 0;
  std::snprintf(line, sizeof line, "%.*s: %lld pass(es), %lld token(s), %.3f ms per token\n", static_cast<int>(title.size()),
                title.data(), static_cast<long long>(times.passes()), static_cast<long long>(times.tokens()),
                times.pass_seconds() * per_token);
  out += line;
  std::snprintf(line, sizeof line, "| %-30s | %12s | %7s |\n|%s|%s|%s|\n", "op", "ms per token", "% pass",
                std::string(32, '-').c_str(), std::string(14, '-').c_str(), std::string(9, '-').c_str());
  out += line;
  for (std::size_t i = 0; i < kOpCount; ++i) {
    const Op op = static_cast<Op>(i);
    const double seconds = times.seconds(op);
    const double share = times.pass_seconds() > 0 ? 100.0 * seconds / times.pass_seconds() : 0;
    const std::string_view name = op_name(op);
    // Four decimals: a prompt token of a small model spends tenths of a microsecond in some ops.
    std::snprintf(line, sizeof line, "| %-30.*s | %12.4f | %6.1f%% |\n", static_cast<int>(name.size()), name.data(),
                  seconds * per_token, share);
    out += line;
  }
  return out;
}

std::string expert_batch_log(const OpTimes& times, std::uint64_t record_bytes) {
  std::string out = "# coli expert batch log, schema " + std::to_string(kExpertBatchLogSchema) + "\n# record_bytes " +
                    std::to_string(record_bytes) + "\n# moe_layer seconds expert:rows ...\n";
  char field[48];
  for (const ExpertBatchTiming& batch : times.batches()) {
    std::snprintf(field, sizeof field, "%d %.9f", batch.moe_layer, batch.seconds);
    out += field;
    for (const auto& [expert, rows] : batch.expert_rows) {
      std::snprintf(field, sizeof field, " %d:%d", expert, rows);
      out += field;
    }
    out += '\n';
  }
  return out;
}

}  // namespace coli::runtime
