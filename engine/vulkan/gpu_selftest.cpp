#include "vulkan/gpu_selftest.h"

#include <chrono>

#include "coli/base/clock.h"
#include "coli/shaders/selection.h"
#include "vulkan/compute_context.h"
#include "vulkan/gemv_check.h"

namespace coli::vulkan {
namespace {

using Clock = std::chrono::steady_clock;

GpuKernelResult status_entry(const std::string& device, int rows, int cols, const std::string& note) {
  GpuKernelResult result;
  result.device = device;
  result.backend = "vulkan";
  result.rows = rows;
  result.cols = cols;
  result.note = note;
  return result;
}

std::string spec_text(const shaders::ShaderVariant& variant, const shaders::GemvSpec& spec) {
  const std::vector<std::uint32_t> values = shaders::spec_constant_data(variant, spec);
  std::string text;
  for (std::size_t i = 0; i < variant.spec_constants.size() && i < values.size(); ++i) {
    text += (i ? " " : "") + std::string(variant.spec_constants[i].name) + "=" + std::to_string(values[i]);
  }
  return text;
}

std::string join_note(const std::string& first, const std::string& second) {
  if (first.empty()) return second;
  if (second.empty()) return first;
  return first + "; " + second;
}

// The selector words a misfit as a refused COLI_VK_FORCE_VARIANT; here
// nothing was forced by the user, so keep only the reason after "refused on
// <device>: " (the whole message if that wording ever changes).
std::string without_forcing_prefix(const std::string& message, const std::string& device) {
  const std::string marker = "refused on " + device + ": ";
  const std::size_t at = message.find(marker);
  return at == std::string::npos ? message : message.substr(at + marker.size());
}

// Everything one (shape, format) needs: the quantised matrix (kept alive for
// the weight views), x, and the comparison with the reference.
struct GemvCase {
  kernels::Q8RowMatrix q8;
  kernels::Q4G64Matrix q4;
  WeightFormat format;
  std::vector<float> x;

  GemvWeights weights() const { return format == WeightFormat::q8_row ? gemv_weights(q8) : gemv_weights(q4); }
  GemvComparison compare(std::span<const float> y) const {
    return format == WeightFormat::q8_row ? compare_with_reference(q8, x, y) : compare_with_reference(q4, x, y);
  }
};

GemvCase make_case(const SelftestShape& shape, WeightFormat format, std::uint64_t seed) {
  const std::uint64_t case_seed = seed * 1000003u + static_cast<std::uint64_t>(shape.rows) * 7919u +
                                  static_cast<std::uint64_t>(shape.cols);
  const std::vector<float> matrix = random_values(static_cast<std::size_t>(shape.rows) * shape.cols, case_seed);
  GemvCase c{{}, {}, format, random_values(static_cast<std::size_t>(shape.cols), case_seed + 1)};
  if (format == WeightFormat::q8_row) {
    c.q8 = kernels::quantize_q8_row(matrix, shape.rows, shape.cols);
  } else {
    c.q4 = kernels::quantize_q4_g64(matrix, shape.rows, shape.cols);
  }
  return c;
}

class SelftestRun {
 public:
  explicit SelftestRun(const SelftestOptions& options) : options_(options), start_(Clock::now()) {}

  void run_device(int index, const std::string& listed_name);
  std::vector<GpuKernelResult> results;

 private:
  void run_shapes(int index, const std::string& listed_name);
  void run_shape(ComputeContext& context, const SelftestShape& shape, WeightFormat format);
  GpuKernelResult run_variant(ComputeContext& context, const GemvCase& c, const shaders::ShaderVariant& variant,
                              const shaders::GemvSpec& spec);
  bool budget_left() const {
    return coli::seconds_since(start_) < options_.time_budget_seconds;
  }

  const SelftestOptions& options_;
  Clock::time_point start_;
};

void SelftestRun::run_device(int index, const std::string& listed_name) {
  const std::size_t first = results.size();
  run_shapes(index, listed_name);
  // The index tells two identical GPUs' results apart (their names are equal).
  for (std::size_t i = first; i < results.size(); ++i) results[i].device_index = index;
}

void SelftestRun::run_shapes(int index, const std::string& listed_name) {
  ContextOptions context_options;
  context_options.device_index = index;
  context_options.shared_memory_limit_bytes = options_.shared_memory_limit_bytes;
  context_options.force_staging = options_.force_staging;
  auto context = ComputeContext::create(context_options);
  if (!context) {
    results.push_back(status_entry(listed_name, 0, 0, "device not usable: " + context.error().message));
    return;
  }
  for (const SelftestShape& shape : options_.shapes) {
    for (WeightFormat format : options_.formats) run_shape(**context, shape, format);
  }
}

void SelftestRun::run_shape(ComputeContext& context, const SelftestShape& shape, WeightFormat format) {
  const std::string& device = context.facts().name;
  const std::string format_name(name_of(format));
  if (shape.rows <= 0 || shape.cols <= 0 || !traits(format).valid_cols(static_cast<std::uint64_t>(shape.cols))) {
    results.push_back(status_entry(device, shape.rows, shape.cols, format_name + ": shape not valid for this format"));
    return;
  }
  const shaders::GemvShape gemv_shape{format, static_cast<std::uint32_t>(shape.rows),
                                      static_cast<std::uint32_t>(shape.cols)};
  // The context's facts already carry the pretended limit, so no override.
  auto chosen = shaders::select_gemv_variant(context.facts(), gemv_shape);
  if (!chosen) {
    results.push_back(status_entry(device, shape.rows, shape.cols, format_name + ": " + chosen.error().message));
  }
  const GemvCase gemv_case = make_case(shape, format, options_.seed);
  for (const shaders::ShaderVariant& variant : shaders::gemv_catalogue()) {
    if (variant.format != format) continue;
    GpuKernelResult result = status_entry(device, shape.rows, shape.cols, "");
    result.variant = std::string(variant.name);
    // The selector's fit check and spec values for this variant alone.
    shaders::SelectionOverrides force;
    force.force_variant = result.variant;
    auto fitted = shaders::select_gemv_variant(context.facts(), gemv_shape, force);
    if (!fitted) {
      result.shared_memory_bytes = variant.shared_memory_bytes(variant.defaults);
      result.note = "skipped: " + without_forcing_prefix(fitted.error().message, context.facts().name);
      results.push_back(std::move(result));
      continue;
    }
    result = run_variant(context, gemv_case, variant, fitted->spec);
    if (chosen && chosen->variant == &variant) result.note = join_note("chosen: " + chosen->reason, result.note);
    results.push_back(std::move(result));
  }
}

GpuKernelResult SelftestRun::run_variant(ComputeContext& context, const GemvCase& c,
                                         const shaders::ShaderVariant& variant, const shaders::GemvSpec& spec) {
  const GemvWeights weights = c.weights();
  GpuKernelResult result = status_entry(context.facts().name, weights.rows, weights.cols, "");
  result.variant = std::string(variant.name);
  result.shared_memory_bytes = variant.shared_memory_bytes(spec);
  const std::string spec_note = "spec " + spec_text(variant, spec);
  const bool timing = options_.measure_bandwidth && budget_left();
  const int copies = timing ? weight_copies_for(weights, options_.timing) : 1;
  auto runner = GemvRunner::create(context, weights, variant, spec, copies);
  if (!runner) {
    result.note = join_note(spec_note, "error: " + runner.error().message);
    return result;
  }
  auto y = (*runner)->run(c.x);
  if (!y) {
    result.note = join_note(spec_note, "error: " + y.error().message);
    return result;
  }
  const GemvComparison comparison = c.compare(*y);
  result.passed = comparison.passed;
  result.max_relative_error = comparison.max_relative_error;
  result.note = spec_note;
  if (!comparison.passed) {
    result.note = join_note(result.note, "wrong result: error " + std::to_string(comparison.max_relative_error) +
                                             " > tolerance " + std::to_string(comparison.tolerance) + " at row " +
                                             std::to_string(comparison.worst_row));
    return result;
  }
  if (!options_.measure_bandwidth) return result;
  if (!timing || !budget_left()) {
    result.note = join_note(result.note, "not timed: time budget of " + std::to_string(options_.time_budget_seconds) +
                                             " s spent");
    return result;
  }
  auto gb_per_s = (*runner)->measure(options_.timing);
  if (!gb_per_s) {
    result.note = join_note(result.note, "timing failed: " + gb_per_s.error().message);
    return result;
  }
  result.gb_per_s = *gb_per_s;
  if (copies > 1) result.note = join_note(result.note, std::to_string(copies) + " weight copies (cold cache)");
  return result;
}

}  // namespace

std::vector<GpuKernelResult> run_gpu_selftest(const SelftestOptions& options) {
  SelftestRun run(options);
  auto listing = list_vulkan_devices();
  if (!listing) {
    run.results.push_back(status_entry("", 0, 0, listing.error().message));
    return std::move(run.results);
  }
  const int count = static_cast<int>(listing->devices.size());
  if (count == 0) {
    run.results.push_back(status_entry("", 0, 0, "no Vulkan device: the loader " + listing->loader + " found no driver"));
    return std::move(run.results);
  }
  if (options.device_index && (*options.device_index < 0 || *options.device_index >= count)) {
    run.results.push_back(status_entry("", 0, 0, "no Vulkan device " + std::to_string(*options.device_index) +
                                                     ": there are " + std::to_string(count)));
    return std::move(run.results);
  }
  for (int index = 0; index < count; ++index) {
    if (options.device_index && *options.device_index != index) continue;
    run.run_device(index, listing->devices[static_cast<std::size_t>(index)]);
  }
  return std::move(run.results);
}

}  // namespace coli::vulkan
