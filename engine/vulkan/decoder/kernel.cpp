#include "vulkan/decoder/kernel.h"

#include "vulkan/compute_pipeline.h"

namespace coli::vulkan {

Result<std::unique_ptr<Kernel>> Kernel::create(ComputeContext& context, const KernelDesc& desc) {
  if (desc.spirv.empty()) return make_error("decoder kernel " + desc.name + " is not embedded in this build");
  if (std::string refusal = shared_memory_refusal(context, desc.name, desc.shared_memory_bytes); !refusal.empty()) {
    return make_error(refusal);
  }
  if (desc.workgroup_size > context.facts().max_workgroup_invocations) {
    return make_error("decoder kernel " + desc.name + " needs " + std::to_string(desc.workgroup_size) +
                      " invocations per workgroup; " + context.facts().name + " allows " +
                      std::to_string(context.facts().max_workgroup_invocations));
  }
  std::unique_ptr<Kernel> kernel(new Kernel(context));
  if (Status s = kernel->init(desc); !s) return s.error();
  return kernel;
}

Status Kernel::init(const KernelDesc& desc) {
  desc_ = desc;
  const auto& fn = context_->fn();
  VkShaderModuleCreateInfo module_info{VK_STRUCTURE_TYPE_SHADER_MODULE_CREATE_INFO};
  module_info.codeSize = desc.spirv.size_bytes();
  module_info.pCode = desc.spirv.data();
  if (VkResult r = fn.vkCreateShaderModule(context_->device(), &module_info, nullptr, &module_); r != VK_SUCCESS) {
    module_ = VK_NULL_HANDLE;
    return vulkan_call_failed("vkCreateShaderModule", r);
  }
  VkPushConstantRange range{VK_SHADER_STAGE_COMPUTE_BIT, 0, desc.push_constant_bytes};
  VkPipelineLayoutCreateInfo layout_info{VK_STRUCTURE_TYPE_PIPELINE_LAYOUT_CREATE_INFO};
  layout_info.pushConstantRangeCount = desc.push_constant_bytes > 0 ? 1 : 0;
  layout_info.pPushConstantRanges = &range;
  if (VkResult r = fn.vkCreatePipelineLayout(context_->device(), &layout_info, nullptr, &layout_); r != VK_SUCCESS) {
    layout_ = VK_NULL_HANDLE;
    return vulkan_call_failed("vkCreatePipelineLayout", r);
  }
  std::vector<VkSpecializationMapEntry> entries;
  for (std::uint32_t i = 0; i < desc.specialization.size(); ++i) entries.push_back({i, 4 * i, 4});
  VkSpecializationInfo spec{static_cast<std::uint32_t>(entries.size()), entries.data(),
                            desc.specialization.size() * 4, desc.specialization.data()};
  VkComputePipelineCreateInfo info{VK_STRUCTURE_TYPE_COMPUTE_PIPELINE_CREATE_INFO};
  info.stage = {VK_STRUCTURE_TYPE_PIPELINE_SHADER_STAGE_CREATE_INFO};
  info.stage.stage = VK_SHADER_STAGE_COMPUTE_BIT;
  info.stage.module = module_;
  info.stage.pName = "main";
  info.stage.pSpecializationInfo = entries.empty() ? nullptr : &spec;
  info.layout = layout_;
  if (VkResult r = fn.vkCreateComputePipelines(context_->device(), VK_NULL_HANDLE, 1, &info, nullptr, &pipeline_);
      r != VK_SUCCESS) {
    pipeline_ = VK_NULL_HANDLE;
    return make_error("decoder kernel " + desc.name + ": " + vulkan_call_failed("vkCreateComputePipelines", r).message);
  }
  return Ok{};
}

Kernel::~Kernel() {
  const auto& fn = context_->fn();
  if (pipeline_) fn.vkDestroyPipeline(context_->device(), pipeline_, nullptr);
  if (layout_) fn.vkDestroyPipelineLayout(context_->device(), layout_, nullptr);
  if (module_) fn.vkDestroyShaderModule(context_->device(), module_, nullptr);
}

void Kernel::record(VkCommandBuffer cmd, const void* push, std::uint32_t x, std::uint32_t y, std::uint32_t z) const {
  const auto& fn = context_->fn();
  fn.vkCmdBindPipeline(cmd, VK_PIPELINE_BIND_POINT_COMPUTE, pipeline_);
  if (desc_.push_constant_bytes > 0) {
    fn.vkCmdPushConstants(cmd, layout_, VK_SHADER_STAGE_COMPUTE_BIT, 0, desc_.push_constant_bytes, push);
  }
  fn.vkCmdDispatch(cmd, x, y, z);
}

}  // namespace coli::vulkan
