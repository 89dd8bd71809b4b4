// What a representation of a checkpoint costs in quality, as measured by
// `coli perplexity --base F32 --record FILE` (docs/quality.md): per expert
// format x dense format, the KL divergence against the f32 model, top-1
// agreement and perplexity on a named text. coli-plan --quality FILE prints
// the planned representation's figures and the other measured ones that fit.
// A quality file is JSON, schema_version 1, one checkpoint (model_identity).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "coli/base/result.h"
#include "coli/base/weight_format.h"

namespace coli::planner {

struct QualityEntry {
  WeightFormat experts = WeightFormat::q4_g64;
  DenseFormat dense = DenseFormat::source;
  double kld_mean = 0, kld_p99 = 0;
  double top1_agreement = 0;                  // [0, 1]
  double perplexity = 0, base_perplexity = 0;
  std::uint64_t tokens = 0;                   // scored
  std::string text;                           // what was scored (a file name)
};

struct QualityTable {
  std::string model_identity;  // model_identity(): the checkpoint, whatever its formats
  std::vector<QualityEntry> entries;
  const QualityEntry* find(WeightFormat experts, DenseFormat dense) const;
  // Adds `entry`, replacing an earlier one of the same representation.
  void record(const QualityEntry& entry);
};

// Errors name `origin` and the field: not JSON, another schema_version, a
// format name coli does not know, a figure that is not a finite number >= 0.
Result<QualityTable> parse_quality_json(std::string_view text, const std::string& origin);
std::string quality_to_json(const QualityTable& table);

}  // namespace coli::planner
