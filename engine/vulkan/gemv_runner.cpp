#include "vulkan/gemv_runner.h"

#include <algorithm>
#include <cmath>

#include "coli/shaders/selection.h"
#include "measure/stats.h"

namespace coli::vulkan {
namespace {

constexpr int kMaxWeightCopies = 256;

template <class T>
std::span<const std::byte> bytes_of(const std::vector<T>& values) {
  return std::as_bytes(std::span<const T>(values));
}

}  // namespace

GemvWeights gemv_weights(const kernels::Q8RowMatrix& matrix) {
  return {WeightFormat::q8_row, matrix.rows, matrix.cols, bytes_of(matrix.weights), bytes_of(matrix.scales),
          kernels::gemv_bytes(matrix)};
}

GemvWeights gemv_weights(const kernels::Q4G64Matrix& matrix) {
  return {WeightFormat::q4_g64, matrix.rows, matrix.cols, bytes_of(matrix.nibbles), bytes_of(matrix.scales),
          kernels::gemv_bytes(matrix)};
}

int weight_copies_for(const GemvWeights& weights, const GemvTimingOptions& options) {
  const std::size_t one = std::max<std::size_t>(1, weights.weights.size() + weights.scales.size());
  const std::size_t wanted = (options.min_weight_footprint_bytes + one - 1) / one;
  return static_cast<int>(std::clamp<std::size_t>(wanted, 1, kMaxWeightCopies));
}

Result<std::unique_ptr<GemvRunner>> GemvRunner::create(ComputeContext& context, const GemvWeights& weights,
                                                       const shaders::ShaderVariant& variant,
                                                       const shaders::GemvSpec& spec, int weight_copies) {
  std::unique_ptr<GemvRunner> runner(new GemvRunner(context));
  if (Status s = runner->init(weights, variant, spec, weight_copies); !s) return s.error();
  return runner;
}

GemvRunner::~GemvRunner() = default;

Status GemvRunner::init(const GemvWeights& weights, const shaders::ShaderVariant& variant,
                        const shaders::GemvSpec& spec, int weight_copies) {
  const std::string name(variant.name);
  if (variant.format != weights.format) {
    return make_error("variant " + name + " is for " + std::string(name_of(variant.format)) +
                      " weights, not " + std::string(name_of(weights.format)));
  }
  if (weights.rows <= 0 || weights.cols <= 0 ||
      !traits(weights.format).valid_cols(static_cast<std::uint64_t>(weights.cols))) {
    return make_error("GEMV shape " + std::to_string(weights.rows) + "x" + std::to_string(weights.cols) +
                      " is not valid for " + std::string(name_of(weights.format)));
  }
  // Shared memory first (the check whose failure loses devices), then the
  // selector's other fit rules; both before any Vulkan object is made.
  shared_memory_bytes_ = variant.shared_memory_bytes(spec);
  if (std::string refusal = shared_memory_refusal(*context_, name, shared_memory_bytes_); !refusal.empty()) {
    return make_error(refusal);
  }
  const VulkanDevice& facts = context_->facts();
  if (std::string why = shaders::why_not_fits(variant, spec, facts, facts.max_compute_shared_memory_bytes);
      !why.empty()) {
    return make_error("refusing to create pipeline " + name + ": " + why);
  }

  push_ = {static_cast<std::uint32_t>(weights.rows), static_cast<std::uint32_t>(weights.cols)};
  workgroups_ = shaders::workgroup_count(push_.rows, spec);
  bytes_per_call_ = weights.bytes_per_call;
  weight_copies = std::clamp(weight_copies, 1, kMaxWeightCopies);

  for (int copy = 0; copy < weight_copies; ++copy) {
    for (std::span<const std::byte> data : {weights.weights, weights.scales}) {
      auto buffer = StorageBuffer::create(*context_, data.size());
      if (!buffer) return buffer.error();
      if (Status s = (*buffer)->upload(data.data(), data.size()); !s) return s;
      weight_buffers_.push_back(std::move(*buffer));
    }
  }
  auto x = StorageBuffer::create(*context_, static_cast<std::size_t>(weights.cols) * sizeof(float));
  if (!x) return x.error();
  x_ = std::move(*x);
  const std::vector<float> zeros(static_cast<std::size_t>(weights.cols), 0.0f);
  if (Status s = x_->upload(zeros.data(), zeros.size() * sizeof(float)); !s) return s;
  auto y = StorageBuffer::create(*context_, static_cast<std::size_t>(weights.rows) * sizeof(float));
  if (!y) return y.error();
  y_ = std::move(*y);

  PipelineDesc desc;
  desc.name = name;
  desc.spirv = variant.spirv;
  const std::vector<std::uint32_t> values = shaders::spec_constant_data(variant, spec);
  for (std::size_t i = 0; i < variant.spec_constants.size() && i < values.size(); ++i) {
    desc.specialization.push_back({variant.spec_constants[i].id, values[i]});
  }
  desc.push_constant_bytes = sizeof(shaders::GemvPushConstants);
  desc.storage_buffers = 4;
  desc.shared_memory_bytes = shared_memory_bytes_;
  desc.require_full_subgroups = !variant.required_subgroup_operations.empty();
  desc.max_descriptor_sets = static_cast<std::uint32_t>(weight_copies);
  auto pipeline = ComputePipeline::create(*context_, desc);
  if (!pipeline) return pipeline.error();
  pipeline_ = std::move(*pipeline);
  for (int copy = 0; copy < weight_copies; ++copy) {
    StorageBuffer* const buffers[] = {weight_buffers_[2 * copy].get(), weight_buffers_[2 * copy + 1].get(), x_.get(),
                                      y_.get()};
    auto set = pipeline_->allocate_set(buffers);
    if (!set) return set.error();
    sets_.push_back(*set);
  }
  return Ok{};
}

Result<std::vector<float>> GemvRunner::run(std::span<const float> x) {
  if (x.size() != push_.cols) {
    return make_error("GEMV x has " + std::to_string(x.size()) + " values, the matrix " + std::to_string(push_.cols) +
                      " columns");
  }
  if (Status s = x_->upload(x.data(), x.size_bytes()); !s) return s.error();
  Status ran = context_->submit_and_wait(
      [&](VkCommandBuffer cmd) { pipeline_->record_dispatch(cmd, sets_.front(), &push_, workgroups_); });
  if (!ran) return ran.error();
  std::vector<float> y(push_.rows);
  if (Status s = y_->download(y.data(), y.size() * sizeof(float)); !s) return s.error();
  return y;
}

Result<double> GemvRunner::time_dispatches(int dispatches) {
  return context_->submit_timed([&](VkCommandBuffer cmd) {
    for (int i = 0; i < dispatches; ++i) {
      if (i > 0) record_compute_barrier(*context_, cmd);
      pipeline_->record_dispatch(cmd, sets_[static_cast<std::size_t>(i) % sets_.size()], &push_, workgroups_);
    }
  });
}

Result<SampleStats> GemvRunner::measure(const GemvTimingOptions& options) {
  // The first submission warms up (pipeline, caches, clocks) and sizes the
  // rest; with one call it still includes launch overhead, so it is only a
  // guide and is not kept.
  const int warmup_calls = static_cast<int>(sets_.size());  // touches every weight copy once
  auto first = time_dispatches(warmup_calls);
  if (!first) return first.error();
  const double per_call_guess = std::max(*first / warmup_calls, 1e-9);
  const int dispatches = std::clamp(static_cast<int>(std::lround(options.target_sample_seconds / per_call_guess)), 1,
                                    std::max(1, options.max_dispatches));
  std::vector<double> samples;
  for (int sample = 0; sample < std::max(1, options.samples); ++sample) {
    auto seconds = time_dispatches(dispatches);
    if (!seconds) return seconds.error();
    if (*seconds <= 0) return make_error("the device reported zero time for " + std::to_string(dispatches) + " GEMV calls");
    samples.push_back(static_cast<double>(bytes_per_call_) * dispatches / *seconds / 1e9);
  }
  return probe::summarize(std::move(samples));
}

}  // namespace coli::vulkan
