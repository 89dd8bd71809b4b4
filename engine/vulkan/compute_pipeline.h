// RAII compute pipelines: SPIR-V module + specialization constants + push
// constants + one descriptor set layout of N storage buffers (set 0,
// bindings 0..N-1), with a small pool to allocate descriptor sets from.
//
// Creation first checks the shared memory the shader declares (for the
// chosen spec values) against the device's limit, pretended or real, and
// refuses before any Vulkan object exists: drivers accept oversized
// pipelines and then lose the device when they run.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "vulkan/compute_context.h"
#include "vulkan/storage_buffer.h"

namespace coli::vulkan {

struct SpecializationValue {
  std::uint32_t constant_id = 0;
  std::uint32_t value = 0;  // every spec constant here is a 32-bit int/uint
};

struct PipelineDesc {
  std::string name;                         // for messages
  std::span<const std::uint32_t> spirv;     // entry point "main"
  std::vector<SpecializationValue> specialization;
  std::uint32_t push_constant_bytes = 0;    // compute stage, offset 0
  std::uint32_t storage_buffers = 0;        // bindings 0..N-1 of set 0
  // Workgroup memory the module declares at these spec values; must come
  // from the shader's own declaration (the catalogue formula), not a guess.
  std::uint32_t shared_memory_bytes = 0;
  // Ask for full subgroups (subgroup-reduction shaders assume them); only
  // honoured when the device enabled computeFullSubgroups.
  bool require_full_subgroups = false;
  std::uint32_t max_descriptor_sets = 1;    // sets allocate_set() may hand out
};

// "" when `bytes` fits the context's limit, else the refusal message.
std::string shared_memory_refusal(const ComputeContext& context, const std::string& name, std::uint32_t bytes);

class ComputePipeline {
 public:
  static Result<std::unique_ptr<ComputePipeline>> create(ComputeContext& context, const PipelineDesc& desc);
  ~ComputePipeline();
  ComputePipeline(const ComputePipeline&) = delete;
  ComputePipeline& operator=(const ComputePipeline&) = delete;

  // A descriptor set with buffers[i] at binding i (whole buffer each). The
  // set lives as long as the pipeline.
  Result<VkDescriptorSet> allocate_set(std::span<StorageBuffer* const> buffers);

  // Binds pipeline and set, pushes `push` (push_constant_bytes of it) and
  // dispatches groups_x x 1 x 1 workgroups.
  void record_dispatch(VkCommandBuffer cmd, VkDescriptorSet set, const void* push, std::uint32_t groups_x) const;

  const std::string& name() const { return name_; }

 private:
  explicit ComputePipeline(ComputeContext& context) : context_(&context) {}
  Status init(const PipelineDesc& desc);

  ComputeContext* context_;
  std::string name_;
  std::uint32_t storage_buffers_ = 0;
  std::uint32_t push_constant_bytes_ = 0;
  VkShaderModule module_ = VK_NULL_HANDLE;
  VkDescriptorSetLayout set_layout_ = VK_NULL_HANDLE;
  VkPipelineLayout layout_ = VK_NULL_HANDLE;
  VkPipeline pipeline_ = VK_NULL_HANDLE;
  VkDescriptorPool pool_ = VK_NULL_HANDLE;
};

// Makes the previous dispatch's writes visible to the next dispatch's reads
// and orders its writes after them (GEMV calls that reuse y back to back).
void record_compute_barrier(const ComputeContext& context, VkCommandBuffer cmd);

}  // namespace coli::vulkan
