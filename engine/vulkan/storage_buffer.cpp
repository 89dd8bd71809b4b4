#include "vulkan/storage_buffer.h"

#include <cstring>

namespace coli::vulkan {
namespace {

constexpr VkMemoryPropertyFlags kHostMemory =
    VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT | VK_MEMORY_PROPERTY_HOST_COHERENT_BIT;

std::size_t round_up_to_words(std::size_t bytes) { return bytes == 0 ? 4 : (bytes + 3) / 4 * 4; }

}  // namespace

Result<std::unique_ptr<StorageBuffer>> StorageBuffer::create(ComputeContext& context, std::size_t bytes) {
  std::unique_ptr<StorageBuffer> buffer(new StorageBuffer(context));
  constexpr VkBufferUsageFlags transfers = VK_BUFFER_USAGE_TRANSFER_SRC_BIT | VK_BUFFER_USAGE_TRANSFER_DST_BIT;
  const Status made = context.uses_staging()
                          ? buffer->init(bytes, VK_BUFFER_USAGE_STORAGE_BUFFER_BIT | transfers,
                                         VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT)
                          : buffer->init(bytes, VK_BUFFER_USAGE_STORAGE_BUFFER_BIT | transfers, kHostMemory);
  if (!made) return made.error();
  return buffer;
}

Status StorageBuffer::init(std::size_t bytes, VkBufferUsageFlags usage, VkMemoryPropertyFlags memory) {
  const vk::DeviceFunctions& fn = context_->fn();
  size_ = round_up_to_words(bytes);
  VkBufferCreateInfo info{VK_STRUCTURE_TYPE_BUFFER_CREATE_INFO};
  info.size = size_;
  info.usage = usage;
  info.sharingMode = VK_SHARING_MODE_EXCLUSIVE;
  if (VkResult r = fn.vkCreateBuffer(context_->device(), &info, nullptr, &buffer_); r != VK_SUCCESS) {
    buffer_ = VK_NULL_HANDLE;
    return vulkan_call_failed("vkCreateBuffer", r);
  }
  VkMemoryRequirements requirements{};
  fn.vkGetBufferMemoryRequirements(context_->device(), buffer_, &requirements);
  auto type = context_->find_memory_type(requirements.memoryTypeBits, memory);
  if (!type) return type.error();
  VkMemoryAllocateInfo alloc{VK_STRUCTURE_TYPE_MEMORY_ALLOCATE_INFO};
  alloc.allocationSize = requirements.size;
  alloc.memoryTypeIndex = *type;
  if (VkResult r = fn.vkAllocateMemory(context_->device(), &alloc, nullptr, &memory_); r != VK_SUCCESS) {
    memory_ = VK_NULL_HANDLE;
    return make_error(vulkan_call_failed("vkAllocateMemory", r).message + " (" + std::to_string(requirements.size) +
                      " bytes)");
  }
  if (VkResult r = fn.vkBindBufferMemory(context_->device(), buffer_, memory_, 0); r != VK_SUCCESS) {
    return vulkan_call_failed("vkBindBufferMemory", r);
  }
  if (memory & VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT) {
    if (VkResult r = fn.vkMapMemory(context_->device(), memory_, 0, VK_WHOLE_SIZE, 0, &mapped_); r != VK_SUCCESS) {
      mapped_ = nullptr;
      return vulkan_call_failed("vkMapMemory", r);
    }
  }
  return Ok{};
}

StorageBuffer::~StorageBuffer() {
  const vk::DeviceFunctions& fn = context_->fn();
  if (mapped_) fn.vkUnmapMemory(context_->device(), memory_);
  if (buffer_) fn.vkDestroyBuffer(context_->device(), buffer_, nullptr);
  if (memory_) fn.vkFreeMemory(context_->device(), memory_, nullptr);
}

Status StorageBuffer::upload(const void* data, std::size_t bytes) {
  if (bytes > size_) return make_error("upload of " + std::to_string(bytes) + " bytes into a " + std::to_string(size_) + "-byte buffer");
  if (mapped_) {
    std::memcpy(mapped_, data, bytes);  // coherent memory: visible to the next submit
    return Ok{};
  }
  return copy_through_staging(data, nullptr, bytes);
}

Status StorageBuffer::download(void* data, std::size_t bytes) {
  if (bytes > size_) return make_error("download of " + std::to_string(bytes) + " bytes from a " + std::to_string(size_) + "-byte buffer");
  if (mapped_) {
    std::memcpy(data, mapped_, bytes);  // submit_and_wait already waited for the writes
    return Ok{};
  }
  return copy_through_staging(nullptr, data, bytes);
}

// One of upload_from / download_to is set.
Status StorageBuffer::copy_through_staging(const void* upload_from, void* download_to, std::size_t bytes) {
  if (bytes == 0) return Ok{};
  StorageBuffer staging(*context_);
  const VkBufferUsageFlags usage = upload_from ? VK_BUFFER_USAGE_TRANSFER_SRC_BIT : VK_BUFFER_USAGE_TRANSFER_DST_BIT;
  if (Status s = staging.init(bytes, usage, kHostMemory); !s) return s;
  if (upload_from) std::memcpy(staging.mapped_, upload_from, bytes);
  const VkDeviceSize copy_bytes = round_up_to_words(bytes);
  Status copied = context_->submit_and_wait([&](VkCommandBuffer cmd) {
    VkBufferCopy region{0, 0, copy_bytes};
    // Earlier dispatches wrote this buffer (download) or may still read it
    // (upload): order the copy after all compute work.
    VkMemoryBarrier before{VK_STRUCTURE_TYPE_MEMORY_BARRIER};
    before.srcAccessMask = VK_ACCESS_SHADER_WRITE_BIT | VK_ACCESS_SHADER_READ_BIT;
    before.dstAccessMask = VK_ACCESS_TRANSFER_READ_BIT | VK_ACCESS_TRANSFER_WRITE_BIT;
    context_->fn().vkCmdPipelineBarrier(cmd, VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT, VK_PIPELINE_STAGE_TRANSFER_BIT, 0, 1,
                                        &before, 0, nullptr, 0, nullptr);
    if (upload_from) {
      context_->fn().vkCmdCopyBuffer(cmd, staging.buffer_, buffer_, 1, &region);
    } else {
      context_->fn().vkCmdCopyBuffer(cmd, buffer_, staging.buffer_, 1, &region);
    }
    // Make the copy's writes visible to later dispatches and to the host.
    VkMemoryBarrier after{VK_STRUCTURE_TYPE_MEMORY_BARRIER};
    after.srcAccessMask = VK_ACCESS_TRANSFER_WRITE_BIT;
    after.dstAccessMask = VK_ACCESS_SHADER_READ_BIT | VK_ACCESS_SHADER_WRITE_BIT | VK_ACCESS_HOST_READ_BIT;
    context_->fn().vkCmdPipelineBarrier(cmd, VK_PIPELINE_STAGE_TRANSFER_BIT,
                                        VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT | VK_PIPELINE_STAGE_HOST_BIT, 0, 1, &after,
                                        0, nullptr, 0, nullptr);
  });
  if (!copied) return copied;
  if (download_to) std::memcpy(download_to, staging.mapped_, bytes);
  return Ok{};
}

}  // namespace coli::vulkan
