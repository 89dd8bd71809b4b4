#include "vulkan/compute_pipeline.h"

#include <algorithm>

namespace coli::vulkan {

std::string shared_memory_refusal(const ComputeContext& context, const std::string& name, std::uint32_t bytes) {
  const std::uint32_t limit = context.facts().max_compute_shared_memory_bytes;
  if (bytes <= limit) return "";
  std::string message = "refusing to create pipeline " + name + ": it declares " + std::to_string(bytes) +
                        " bytes of shared memory but " + context.facts().name + " allows " + std::to_string(limit);
  if (context.shared_memory_pretended()) {
    message += " (pretended limit; the device reports " + std::to_string(context.real_shared_memory_bytes()) + ")";
  } else {
    message += " (maxComputeSharedMemorySize)";
  }
  return message;
}

Result<std::unique_ptr<ComputePipeline>> ComputePipeline::create(ComputeContext& context, const PipelineDesc& desc) {
  // The check comes before any Vulkan call: an oversized pipeline must never
  // reach the driver.
  if (std::string refusal = shared_memory_refusal(context, desc.name, desc.shared_memory_bytes); !refusal.empty()) {
    return make_error(refusal);
  }
  if (desc.spirv.empty()) return make_error("pipeline " + desc.name + " has no SPIR-V");
  std::unique_ptr<ComputePipeline> pipeline(new ComputePipeline(context));
  if (Status s = pipeline->init(desc); !s) return make_error("pipeline " + desc.name + ": " + s.error().message);
  return pipeline;
}

Status ComputePipeline::init(const PipelineDesc& desc) {
  const vk::DeviceFunctions& fn = context_->fn();
  const VkDevice device = context_->device();
  name_ = desc.name;
  storage_buffers_ = desc.storage_buffers;
  push_constant_bytes_ = desc.push_constant_bytes;

  VkShaderModuleCreateInfo module_info{VK_STRUCTURE_TYPE_SHADER_MODULE_CREATE_INFO};
  module_info.codeSize = desc.spirv.size_bytes();
  module_info.pCode = desc.spirv.data();
  if (VkResult r = fn.vkCreateShaderModule(device, &module_info, nullptr, &module_); r != VK_SUCCESS) {
    module_ = VK_NULL_HANDLE;
    return vulkan_call_failed("vkCreateShaderModule", r);
  }

  std::vector<VkDescriptorSetLayoutBinding> bindings(desc.storage_buffers);
  for (std::uint32_t i = 0; i < desc.storage_buffers; ++i) {
    bindings[i] = {i, VK_DESCRIPTOR_TYPE_STORAGE_BUFFER, 1, VK_SHADER_STAGE_COMPUTE_BIT, nullptr};
  }
  VkDescriptorSetLayoutCreateInfo set_info{VK_STRUCTURE_TYPE_DESCRIPTOR_SET_LAYOUT_CREATE_INFO};
  set_info.bindingCount = desc.storage_buffers;
  set_info.pBindings = bindings.data();
  if (VkResult r = fn.vkCreateDescriptorSetLayout(device, &set_info, nullptr, &set_layout_); r != VK_SUCCESS) {
    set_layout_ = VK_NULL_HANDLE;
    return vulkan_call_failed("vkCreateDescriptorSetLayout", r);
  }

  VkPushConstantRange push_range{VK_SHADER_STAGE_COMPUTE_BIT, 0, desc.push_constant_bytes};
  VkPipelineLayoutCreateInfo layout_info{VK_STRUCTURE_TYPE_PIPELINE_LAYOUT_CREATE_INFO};
  layout_info.setLayoutCount = 1;
  layout_info.pSetLayouts = &set_layout_;
  layout_info.pushConstantRangeCount = desc.push_constant_bytes > 0 ? 1 : 0;
  layout_info.pPushConstantRanges = &push_range;
  if (VkResult r = fn.vkCreatePipelineLayout(device, &layout_info, nullptr, &layout_); r != VK_SUCCESS) {
    layout_ = VK_NULL_HANDLE;
    return vulkan_call_failed("vkCreatePipelineLayout", r);
  }

  std::vector<VkSpecializationMapEntry> entries;
  std::vector<std::uint32_t> values;
  for (const SpecializationValue& spec : desc.specialization) {
    entries.push_back({spec.constant_id, static_cast<std::uint32_t>(values.size() * 4), 4});
    values.push_back(spec.value);
  }
  VkSpecializationInfo specialization{static_cast<std::uint32_t>(entries.size()), entries.data(), values.size() * 4,
                                      values.data()};
  VkComputePipelineCreateInfo pipeline_info{VK_STRUCTURE_TYPE_COMPUTE_PIPELINE_CREATE_INFO};
  pipeline_info.stage.sType = VK_STRUCTURE_TYPE_PIPELINE_SHADER_STAGE_CREATE_INFO;
  if (desc.require_full_subgroups && context_->facts().compute_full_subgroups &&
      context_->subgroup_size_control_enabled()) {
    pipeline_info.stage.flags = VK_PIPELINE_SHADER_STAGE_CREATE_REQUIRE_FULL_SUBGROUPS_BIT;
  }
  pipeline_info.stage.stage = VK_SHADER_STAGE_COMPUTE_BIT;
  pipeline_info.stage.module = module_;
  pipeline_info.stage.pName = "main";
  pipeline_info.stage.pSpecializationInfo = entries.empty() ? nullptr : &specialization;
  pipeline_info.layout = layout_;
  if (VkResult r = fn.vkCreateComputePipelines(device, VK_NULL_HANDLE, 1, &pipeline_info, nullptr, &pipeline_);
      r != VK_SUCCESS) {
    pipeline_ = VK_NULL_HANDLE;
    return vulkan_call_failed("vkCreateComputePipelines", r);
  }

  const std::uint32_t sets = std::max<std::uint32_t>(1, desc.max_descriptor_sets);
  VkDescriptorPoolSize pool_size{VK_DESCRIPTOR_TYPE_STORAGE_BUFFER, std::max<std::uint32_t>(1, desc.storage_buffers) * sets};
  VkDescriptorPoolCreateInfo pool_info{VK_STRUCTURE_TYPE_DESCRIPTOR_POOL_CREATE_INFO};
  pool_info.maxSets = sets;
  pool_info.poolSizeCount = 1;
  pool_info.pPoolSizes = &pool_size;
  if (VkResult r = fn.vkCreateDescriptorPool(device, &pool_info, nullptr, &pool_); r != VK_SUCCESS) {
    pool_ = VK_NULL_HANDLE;
    return vulkan_call_failed("vkCreateDescriptorPool", r);
  }
  return Ok{};
}

ComputePipeline::~ComputePipeline() {
  const vk::DeviceFunctions& fn = context_->fn();
  const VkDevice device = context_->device();
  if (pool_) fn.vkDestroyDescriptorPool(device, pool_, nullptr);  // frees its sets
  if (pipeline_) fn.vkDestroyPipeline(device, pipeline_, nullptr);
  if (layout_) fn.vkDestroyPipelineLayout(device, layout_, nullptr);
  if (set_layout_) fn.vkDestroyDescriptorSetLayout(device, set_layout_, nullptr);
  if (module_) fn.vkDestroyShaderModule(device, module_, nullptr);
}

Result<VkDescriptorSet> ComputePipeline::allocate_set(std::span<StorageBuffer* const> buffers) {
  if (buffers.size() != storage_buffers_) {
    return make_error("pipeline " + name_ + " takes " + std::to_string(storage_buffers_) + " buffers, got " +
                      std::to_string(buffers.size()));
  }
  const vk::DeviceFunctions& fn = context_->fn();
  VkDescriptorSetAllocateInfo alloc{VK_STRUCTURE_TYPE_DESCRIPTOR_SET_ALLOCATE_INFO};
  alloc.descriptorPool = pool_;
  alloc.descriptorSetCount = 1;
  alloc.pSetLayouts = &set_layout_;
  VkDescriptorSet set = VK_NULL_HANDLE;
  if (VkResult r = fn.vkAllocateDescriptorSets(context_->device(), &alloc, &set); r != VK_SUCCESS) {
    return vulkan_call_failed("vkAllocateDescriptorSets", r);
  }
  std::vector<VkDescriptorBufferInfo> infos(buffers.size());
  std::vector<VkWriteDescriptorSet> writes(buffers.size());
  for (std::size_t i = 0; i < buffers.size(); ++i) {
    infos[i] = {buffers[i]->handle(), 0, VK_WHOLE_SIZE};
    writes[i] = {VK_STRUCTURE_TYPE_WRITE_DESCRIPTOR_SET};
    writes[i].dstSet = set;
    writes[i].dstBinding = static_cast<std::uint32_t>(i);
    writes[i].descriptorCount = 1;
    writes[i].descriptorType = VK_DESCRIPTOR_TYPE_STORAGE_BUFFER;
    writes[i].pBufferInfo = &infos[i];
  }
  fn.vkUpdateDescriptorSets(context_->device(), static_cast<std::uint32_t>(writes.size()), writes.data(), 0, nullptr);
  return set;
}

void ComputePipeline::record_dispatch(VkCommandBuffer cmd, VkDescriptorSet set, const void* push,
                                      std::uint32_t groups_x) const {
  const vk::DeviceFunctions& fn = context_->fn();
  fn.vkCmdBindPipeline(cmd, VK_PIPELINE_BIND_POINT_COMPUTE, pipeline_);
  fn.vkCmdBindDescriptorSets(cmd, VK_PIPELINE_BIND_POINT_COMPUTE, layout_, 0, 1, &set, 0, nullptr);
  if (push_constant_bytes_ > 0) {
    fn.vkCmdPushConstants(cmd, layout_, VK_SHADER_STAGE_COMPUTE_BIT, 0, push_constant_bytes_, push);
  }
  fn.vkCmdDispatch(cmd, groups_x, 1, 1);
}

void record_compute_barrier(const ComputeContext& context, VkCommandBuffer cmd) {
  VkMemoryBarrier barrier{VK_STRUCTURE_TYPE_MEMORY_BARRIER};
  barrier.srcAccessMask = VK_ACCESS_SHADER_WRITE_BIT;
  barrier.dstAccessMask = VK_ACCESS_SHADER_READ_BIT | VK_ACCESS_SHADER_WRITE_BIT;
  context.fn().vkCmdPipelineBarrier(cmd, VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT, VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT, 0,
                                    1, &barrier, 0, nullptr, 0, nullptr);
}

}  // namespace coli::vulkan
