// One GEMV (y = W x, q8_row or q4_g64) on a Vulkan device with one catalogue
// variant and its spec constants: weights uploaded once, then run() for a
// result and measure() for bandwidth. The buffer bindings and push constants
// follow the catalogue's interface (shaders/include/coli/shaders/catalogue.h).
#pragma once

#include <cstddef>
#include <memory>
#include <span>
#include <vector>

#include "coli/shaders/catalogue.h"
#include "reference/gemv_reference.h"
#include "vulkan/compute_pipeline.h"
#include "vulkan/storage_buffer.h"

namespace coli::vulkan {

// The bytes of one quantised matrix as the shaders read them.
struct GemvWeights {
  WeightFormat format = WeightFormat::q8_row;
  int rows = 0;
  int cols = 0;
  std::span<const std::byte> weights;  // binding 0
  std::span<const std::byte> scales;   // binding 1
  std::size_t bytes_per_call = 0;      // kernels::gemv_bytes: what GB/s counts
};
GemvWeights gemv_weights(const kernels::Q8RowMatrix& matrix);
GemvWeights gemv_weights(const kernels::Q4G64Matrix& matrix);

struct GemvTimingOptions {
  int samples = 5;                    // timed submissions, summarised as SampleStats
  double target_sample_seconds = 0.02;  // dispatches per submission are sized to about this
  int max_dispatches = 2000;          // per submission
  // Cycle through enough copies of the weights that together they exceed
  // this, so repeated calls stream from memory instead of the GPU's cache
  // (an H200 has 50 MB of L2; a 4096x4096 q8 matrix is 17 MB). 0: one copy.
  std::size_t min_weight_footprint_bytes = 0;
};

class GemvRunner {
 public:
  // Refuses, before any pipeline exists, a variant for the other format, a
  // shape the format cannot hold, or a variant+spec that does not fit the
  // device (shared memory against the context's pretended or real limit,
  // workgroup size, subgroup needs). `weight_copies` >= 1 (see
  // GemvTimingOptions::min_weight_footprint_bytes).
  static Result<std::unique_ptr<GemvRunner>> create(ComputeContext& context, const GemvWeights& weights,
                                                    const shaders::ShaderVariant& variant,
                                                    const shaders::GemvSpec& spec, int weight_copies = 1);
  ~GemvRunner();

  // Uploads x (cols floats), dispatches once, returns y (rows floats).
  Result<std::vector<float>> run(std::span<const float> x);
  // Repeats the dispatch (barriers in between, as dependent decode calls
  // would be) and returns GB/s = bytes_per_call / seconds per call, 1 GB =
  // 1e9 bytes. Uses the x of the last run() (zeros before any).
  Result<SampleStats> measure(const GemvTimingOptions& options);

  std::uint32_t shared_memory_bytes() const { return shared_memory_bytes_; }

 private:
  explicit GemvRunner(ComputeContext& context) : context_(&context) {}
  Status init(const GemvWeights& weights, const shaders::ShaderVariant& variant, const shaders::GemvSpec& spec,
              int weight_copies);
  Result<double> time_dispatches(int dispatches);

  ComputeContext* context_;
  shaders::GemvPushConstants push_{};
  std::uint32_t workgroups_ = 0;
  std::uint32_t shared_memory_bytes_ = 0;
  std::size_t bytes_per_call_ = 0;
  std::vector<std::unique_ptr<StorageBuffer>> weight_buffers_;  // weights, scales per copy
  std::unique_ptr<StorageBuffer> x_;
  std::unique_ptr<StorageBuffer> y_;
  std::unique_ptr<ComputePipeline> pipeline_;  // destroyed before the buffers (declared after)
  std::vector<VkDescriptorSet> sets_;          // one per weight copy
};

// Weight copies for `options.min_weight_footprint_bytes` (1..256).
int weight_copies_for(const GemvWeights& weights, const GemvTimingOptions& options);

}  // namespace coli::vulkan
