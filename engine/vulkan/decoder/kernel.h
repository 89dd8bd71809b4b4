// One decoder kernel: a SPIR-V module specialised once (workgroup size, rows
// per workgroup, weight format, tokens per workgroup) behind a pipeline
// layout of push constants only (every buffer is a device address). The
// shared memory its specialisation declares is checked against the device's
// limit, pretended or real, before anything is created: a kernel that does
// not fit is never made (field note 3).
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "vulkan/compute_context.h"

namespace coli::vulkan {

struct KernelDesc {
  std::string name;                          // "matvec.q4_g64.t4", for messages and reports
  std::span<const std::uint32_t> spirv;
  std::vector<std::uint32_t> specialization;  // constant_id i = specialization[i]
  std::uint32_t workgroup_size = 1;           // invocations (checked against the device)
  std::uint32_t shared_memory_bytes = 0;      // what the module declares at these values
  std::uint32_t push_constant_bytes = 0;
};

class Kernel {
 public:
  static Result<std::unique_ptr<Kernel>> create(ComputeContext& context, const KernelDesc& desc);
  ~Kernel();
  Kernel(const Kernel&) = delete;
  Kernel& operator=(const Kernel&) = delete;

  // Binds the pipeline, pushes `push` (push_constant_bytes of it) and
  // dispatches x * y * z workgroups.
  void record(VkCommandBuffer cmd, const void* push, std::uint32_t x, std::uint32_t y = 1, std::uint32_t z = 1) const;
  const KernelDesc& desc() const { return desc_; }

 private:
  explicit Kernel(ComputeContext& context) : context_(&context) {}
  Status init(const KernelDesc& desc);

  ComputeContext* context_;
  KernelDesc desc_;
  VkShaderModule module_ = VK_NULL_HANDLE;
  VkPipelineLayout layout_ = VK_NULL_HANDLE;
  VkPipeline pipeline_ = VK_NULL_HANDLE;
};

}  // namespace coli::vulkan
