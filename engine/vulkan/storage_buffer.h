// RAII storage buffers. Where the device has device-local memory the host
// cannot map (a discrete GPU's HBM), the buffer lives there and upload /
// download go through a temporary host-visible staging buffer and a copy on
// the queue; otherwise (lavapipe, integrated GPUs) the buffer itself is
// host-visible and coherent and is mapped directly.
#pragma once

#include <cstddef>
#include <memory>

#include "vulkan/compute_context.h"

namespace coli::vulkan {

class StorageBuffer {
 public:
  // `bytes` is rounded up to a multiple of 4 (shaders read 32-bit words).
  static Result<std::unique_ptr<StorageBuffer>> create(ComputeContext& context, std::size_t bytes);
  ~StorageBuffer();
  StorageBuffer(const StorageBuffer&) = delete;
  StorageBuffer& operator=(const StorageBuffer&) = delete;

  VkBuffer handle() const { return buffer_; }
  std::size_t size() const { return size_; }
  bool device_local() const { return mapped_ == nullptr; }

  // Copies `bytes` (at most size()) to / from the start of the buffer. Both
  // wait until the copy is complete.
  Status upload(const void* data, std::size_t bytes);
  Status download(void* data, std::size_t bytes);

 private:
  explicit StorageBuffer(ComputeContext& context) : context_(&context) {}
  Status init(std::size_t bytes, VkBufferUsageFlags usage, VkMemoryPropertyFlags memory);
  Status copy_through_staging(const void* upload_from, void* download_to, std::size_t bytes);

  ComputeContext* context_;
  VkBuffer buffer_ = VK_NULL_HANDLE;
  VkDeviceMemory memory_ = VK_NULL_HANDLE;
  void* mapped_ = nullptr;  // persistent mapping of host-visible buffers
  std::size_t size_ = 0;
};

}  // namespace coli::vulkan
