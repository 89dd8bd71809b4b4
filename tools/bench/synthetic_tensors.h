// Random tensors in the byte layouts a coli container holds, for synthetic
// benchmark models. Speed is what matters (a full-size model is gigabytes),
// so the generator is a small xoshiro256** and normals are Irwin-Hall sums:
// the benchmark cares about shapes and bytes, not about the exact values.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "coli/container/container.h"

namespace coli::bench {

class FastRng {
 public:
  explicit FastRng(std::uint64_t seed);
  std::uint64_t next();
  // Approximately N(mean, stddev): four 16-bit uniforms summed (Irwin-Hall).
  float normal(float mean, float stddev);
  float uniform(float low, float high);
  void fill_bytes(std::span<std::byte> out);

 private:
  std::uint64_t state_[4];
};

// rows x cols values drawn from N(mean, stddev), encoded as `dtype` in the
// container's layout (coli/base/weight_format.h; quantised with the reference
// quantisers: q8_row scale = max|w|/127, values rounded half to even). Generated a block of rows at a time, so only
// the encoded tensor is held, never a float copy of it.
std::vector<std::byte> random_tensor(FastRng& rng, WeightFormat dtype, std::uint64_t rows, std::uint64_t cols,
                                     float mean, float stddev);

// Fills one expert record laid out as `parts` say (q4_g64 or q8_row):
// uniformly random quantised weights and scales chosen so the de-quantised
// values have a standard deviation near `stddev`. Random bytes rather than
// quantised normals: ~100x faster, and the kernels' speed does not depend
// on the values.
void fill_expert_record(FastRng& rng, WeightFormat format, std::span<const container::ExpertPart> parts,
                        float stddev, std::span<std::byte> record);

}  // namespace coli::bench
