#include "coli/planner/variant_decider.h"

#include <algorithm>

#include "coli/base/cpu_kernels.h"
#include "coli/base/text.h"
#include "coli/shaders/selection.h"

namespace coli::planner {
namespace {

struct ExpertShape {
  std::string name;
  std::uint32_t rows, cols;
};

// A device with a fitting variant for every expert shape, or why not.
Result<std::vector<VariantChoice>> variants_on(const GpuFacts& gpus, int index, const std::vector<ExpertShape>& shapes,
                                               WeightFormat format,
                                               const std::vector<GpuKernelResult>& all_measured,
                                               const std::string& force_variant) {
  const VulkanDevice& device = gpus.vulkan[static_cast<std::size_t>(index)];
  // This device's measurements only: an identical GPU beside it has the same name.
  std::vector<GpuKernelResult> measured;
  for (const GpuKernelResult& r : all_measured) {
    if (r.measured_on(index, device.name)) measured.push_back(r);
  }
  std::vector<VariantChoice> out;
  shaders::SelectionOverrides overrides;
  overrides.force_variant = force_variant;
  for (const ExpertShape& shape : shapes) {
    auto selection = shaders::select_gemv_variant(device, {format, shape.rows, shape.cols}, overrides, measured);
    if (!selection) return make_error(shape.name + ": " + selection.error().message);
    out.push_back({shape.name + " " + std::to_string(shape.rows) + "x" + std::to_string(shape.cols),
                   std::string(selection->variant->name), selection->shared_memory_bytes, selection->reason});
  }
  return out;
}

}  // namespace

Result<GpuDecision> decide_gpu(const DeviceProfile& profile, const model::ModelConfig& config, WeightFormat experts,
                               const std::string& gpu, const std::string& force_variant) {
  GpuDecision decision;
  if (gpu == "none") {
    if (!force_variant.empty()) return make_error("--gpu-variant " + force_variant + " needs a GPU: drop --gpu none");
    decision.reason = "--gpu none: experts run on the CPU";
    return decision;
  }
  if (!traits(experts).gpu_shaders) {
    decision.reason = std::string(name_of(experts)) + " experts have no GPU shader: experts run on the CPU";
    return decision;
  }
  const WeightFormat format = experts;
  const auto width = static_cast<std::uint32_t>(config.moe_intermediate_size);
  const auto hidden = static_cast<std::uint32_t>(config.hidden_size);
  const std::vector<ExpertShape> shapes = {{"gate/up", width, hidden}, {"down", hidden, width}};
  const auto& devices = profile.gpus.vulkan;
  if (gpu != "auto") {
    const auto index = parse_int(gpu);
    if (!index || *index < 0 || static_cast<std::size_t>(*index) >= devices.size()) {
      return make_error("--gpu " + gpu + ": the profile has " + std::to_string(devices.size()) +
                        " Vulkan device(s) (" + profile.gpus.vulkan_status + "); use none, auto or 0.." +
                        std::to_string(static_cast<long>(devices.size()) - 1));
    }
    const GpuIdentity id = vulkan_identity(profile.gpus, static_cast<int>(*index));
    auto variants = variants_on(profile.gpus, id.index, shapes, format, profile.measurements.gpu_kernels, force_variant);
    if (!variants) return make_error("--gpu " + gpu + " (" + id.name + "): " + variants.error().message);
    decision.gpu = id;
    decision.variants = std::move(*variants);
    decision.reason = "--gpu " + gpu + ": " + id.describe();
    return decision;
  }
  std::string tried;
  for (int index = 0; index < static_cast<int>(devices.size()); ++index) {
    const GpuIdentity id = vulkan_identity(profile.gpus, index);
    auto variants = variants_on(profile.gpus, index, shapes, format, profile.measurements.gpu_kernels, force_variant);
    if (variants) {
      decision.gpu = id;
      decision.variants = std::move(*variants);
      decision.reason = "auto: " + id.describe() + " fits a variant for every expert shape";
      return decision;
    }
    tried += "; " + id.describe() + ": " + variants.error().message;
  }
  decision.reason = "auto: no usable GPU (" + profile.gpus.vulkan_status + tried + "): experts run on the CPU";
  return decision;
}

Result<CpuKernelChoice> decide_cpu_kernel(const DeviceProfile& profile, const std::string& override_kernel) {
  const auto& isa = profile.cpu.isa;
  auto runs = [&](std::size_t variant) { return cpu_kernel_runs_on(variant, isa); };
  auto needs = [](std::size_t variant) {
    std::string text;
    for (const std::string& flag : cpu_kernel_needs(variant)) text += (text.empty() ? "" : ", ") + flag;
    return text.empty() ? std::string("nothing") : text;
  };
  auto amx_note = [](std::size_t variant) {
    return kCpuKernelVariants[variant] == "amx" ? std::string("; the engine asks Linux for AMX tile state and refuses amx if it is denied") : "";
  };
  if (override_kernel == kExactCpuKernel)
    return CpuKernelChoice{"exact", "--kernel exact: f32 activations on de-quantised weights (reference accuracy, slow)"};
  if (!override_kernel.empty()) {
    const auto at = std::find(kCpuKernelVariants.begin(), kCpuKernelVariants.end(), override_kernel);
    if (at == kCpuKernelVariants.end())
      return make_error("--kernel " + override_kernel + " is not a CPU kernel variant: use " + cpu_kernel_names_text());
    const auto variant = static_cast<std::size_t>(at - kCpuKernelVariants.begin());
    if (!runs(variant)) {
      return make_error("--kernel " + override_kernel + " needs " + needs(variant) + ", which the profile's CPU (" +
                        profile.cpu.model + ") lacks: the engine would refuse it at load; choose a supported variant "
                        "or leave --kernel out");
    }
    return CpuKernelChoice{override_kernel, "--kernel " + override_kernel + amx_note(variant)};
  }
  for (std::size_t variant = kCpuKernelVariants.size(); variant-- > 0;) {
    if (!runs(variant)) continue;
    const std::string name(kCpuKernelVariants[variant]);
    return CpuKernelChoice{name, name + ": the widest variant the profile's ISA allows (needs " + needs(variant) +
                                     "); wider variants move more weights per instruction on the same bandwidth" +
                                     (name == "amx" ? ", and amx runs prefill's int8 GEMM on AMX tiles" : "") + amx_note(variant)};
  }
  return CpuKernelChoice{"scalar", "scalar"};
}

}  // namespace coli::planner
