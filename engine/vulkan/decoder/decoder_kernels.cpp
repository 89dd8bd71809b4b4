#include "vulkan/decoder/decoder_kernels.h"

#include <algorithm>

#include "coli/shaders/decoder_modules.h"

namespace coli::vulkan {
namespace {

using shaders::DecoderModule;

template <typename Push>
KernelDesc desc_of(DecoderModule module, std::string name, std::vector<std::uint32_t> spec, std::uint32_t workgroup) {
  KernelDesc desc;
  desc.name = std::move(name);
  desc.spirv = shaders::decoder_module(module);
  desc.specialization = std::move(spec);
  desc.workgroup_size = workgroup;
  desc.shared_memory_bytes = shaders::decoder_shared_memory_bytes(module, workgroup);
  desc.push_constant_bytes = sizeof(Push);
  return desc;
}

Status make(ComputeContext& context, const KernelDesc& desc, std::unique_ptr<Kernel>& out) {
  auto kernel = Kernel::create(context, desc);
  if (!kernel) return kernel.error();
  out = std::move(*kernel);
  return Ok{};
}

}  // namespace

RowKernelShape row_kernel_shape(const VulkanDevice& device) {
  return shaders::decoder_row_shape(device.max_workgroup_invocations, device.max_compute_shared_memory_bytes);
}

// The row kernels: matvec per dense format (one token, and batched), the
// experts' gate/up and down (per choice, and grouped by expert for prefill).
Status KernelSet::make_row_kernels(ComputeContext& context, const std::vector<WeightFormat>& formats,
                                   WeightFormat expert_format, std::uint32_t experts) {
  const RowKernelShape& s = shape;
  const std::string batch = " x" + std::to_string(shaders::kDecoderBatchTokens);
  for (WeightFormat format : formats) {
    auto& pair = matvec[static_cast<std::size_t>(format)];
    const std::vector<std::uint32_t> spec{s.workgroup_size, s.rows, static_cast<std::uint32_t>(format)};
    const std::string name = "matvec " + std::string(name_of(format));
    if (pair[0]) continue;
    if (Status st = make(context, desc_of<MatvecPush>(DecoderModule::matvec, name + " x1", spec, s.workgroup_size), pair[0]); !st) return st;
    if (s.batch_tokens > 1) {
      if (Status st = make(context, desc_of<MatvecPush>(DecoderModule::matvec_batched, name + batch, spec, s.workgroup_size), pair[1]); !st) return st;
    }
  }
  const std::string e(name_of(expert_format));
  const std::vector<std::uint32_t> spec{s.workgroup_size, s.rows, static_cast<std::uint32_t>(expert_format)};
  if (Status st = make(context, desc_of<ExpertGateUpPush>(DecoderModule::expert_gate_up, "expert gate+up " + e, spec, s.workgroup_size), gate_up); !st) return st;
  if (Status st = make(context, desc_of<ExpertDownPush>(DecoderModule::expert_down, "expert down " + e, spec, s.workgroup_size), down); !st) return st;
  if (!s.grouped_experts || experts > shaders::kDecoderMaxGroupedExperts) return Ok{};
  if (Status st = make(context, desc_of<RouteGroupPush>(DecoderModule::route_group, "route_group", {s.workgroup_size}, s.workgroup_size), route_group); !st) return st;
  if (Status st = make(context, desc_of<ExpertGateUpGroupedPush>(DecoderModule::expert_gate_up_grouped, "expert gate+up grouped " + e + batch, spec, s.workgroup_size), gate_up_grouped); !st) return st;
  return make(context, desc_of<ExpertDownGroupedPush>(DecoderModule::expert_down_grouped, "expert down grouped " + e + batch, spec, s.workgroup_size), down_grouped);
}

Result<KernelSet> KernelSet::create(ComputeContext& context, const std::vector<WeightFormat>& formats,
                                    WeightFormat expert_format, std::uint32_t experts) {
  KernelSet set;
  set.shape = row_kernel_shape(context.facts());
  set.norm_workgroup = std::min<std::uint32_t>(256, set.shape.workgroup_size);
  set.attention_workgroup = std::min<std::uint32_t>(128, set.shape.workgroup_size);
  set.topk_workgroup = std::min<std::uint32_t>(64, set.shape.workgroup_size);
  if (Status st = set.make_row_kernels(context, formats, expert_format, experts); !st) return st.error();
  const std::uint32_t nw = set.norm_workgroup, aw = set.attention_workgroup, tw = set.topk_workgroup;
  const std::pair<KernelDesc, std::unique_ptr<Kernel>*> others[] = {
      {desc_of<RmsNormPush>(DecoderModule::rms_norm, "rms_norm", {nw}, nw), &set.rms_norm},
      {desc_of<QkPrepPush>(DecoderModule::qk_prep, "qk_prep", {nw}, nw), &set.qk_prep},
      {desc_of<AttentionPush>(DecoderModule::attention, "attention", {aw}, aw), &set.attention},
      {desc_of<RouteTopkPush>(DecoderModule::route_topk, "route_topk", {tw}, tw), &set.route_topk},
      {desc_of<MoeCombinePush>(DecoderModule::moe_combine, "moe_combine", {nw}, nw), &set.moe_combine},
      {desc_of<SiluMulPush>(DecoderModule::silu_mul, "silu_mul", {nw}, nw), &set.silu_mul}};
  for (const auto& [desc, out] : others) {
    if (Status st = make(context, desc, *out); !st) return st.error();
  }
  return set;
}

std::vector<std::string> KernelSet::names() const {
  std::vector<std::string> out;
  auto add = [&](const std::unique_ptr<Kernel>& kernel) {
    if (kernel) {
      const KernelDesc& d = kernel->desc();
      out.push_back(d.name + " (" + std::to_string(d.workgroup_size) + " invocations, " +
                    std::to_string(d.shared_memory_bytes) + " B shared)");
    }
  };
  for (const auto& pair : matvec) {
    add(pair[0]);
    add(pair[1]);
  }
  for (const auto* kernel : {&gate_up, &down, &route_group, &gate_up_grouped, &down_grouped, &rms_norm, &qk_prep, &attention, &route_topk, &moe_combine, &silu_mul}) {
    add(*kernel);
  }
  return out;
}

void record_full_barrier(const ComputeContext& context, VkCommandBuffer cmd) {
  VkMemoryBarrier barrier{VK_STRUCTURE_TYPE_MEMORY_BARRIER};
  barrier.srcAccessMask = VK_ACCESS_SHADER_WRITE_BIT | VK_ACCESS_TRANSFER_WRITE_BIT;
  barrier.dstAccessMask = VK_ACCESS_SHADER_READ_BIT | VK_ACCESS_SHADER_WRITE_BIT | VK_ACCESS_TRANSFER_READ_BIT |
                          VK_ACCESS_TRANSFER_WRITE_BIT | VK_ACCESS_HOST_READ_BIT;
  context.fn().vkCmdPipelineBarrier(cmd, VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT | VK_PIPELINE_STAGE_TRANSFER_BIT,
                                    VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT | VK_PIPELINE_STAGE_TRANSFER_BIT |
                                        VK_PIPELINE_STAGE_HOST_BIT,
                                    0, 1, &barrier, 0, nullptr, 0, nullptr);
}

}  // namespace coli::vulkan
