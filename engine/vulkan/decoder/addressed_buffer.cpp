#include "vulkan/decoder/addressed_buffer.h"

#include <algorithm>
#include <cstring>

#include "coli/base/text.h"

namespace coli::vulkan {
namespace {

// A copy or kernel that has not finished in a minute has hung the device.
constexpr std::uint64_t kWaitTimeoutNs = 60ull * 1000 * 1000 * 1000;

constexpr VkBufferUsageFlags kUsage = VK_BUFFER_USAGE_STORAGE_BUFFER_BIT | VK_BUFFER_USAGE_TRANSFER_SRC_BIT |
                                      VK_BUFFER_USAGE_TRANSFER_DST_BIT | VK_BUFFER_USAGE_SHADER_DEVICE_ADDRESS_BIT;

// Memory flags to try, best first, for a placement on this device.
std::vector<VkMemoryPropertyFlags> memory_choices(const ComputeContext& context, Placement placement) {
  constexpr VkMemoryPropertyFlags host = VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT | VK_MEMORY_PROPERTY_HOST_COHERENT_BIT;
  if (placement == Placement::host) return {host | VK_MEMORY_PROPERTY_HOST_CACHED_BIT, host};
  // Discrete: VRAM the host cannot map, filled through the staging ring.
  if (context.uses_staging()) return {VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT};
  // Unified: memory both sides see, written in place.
  return {VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT | host, host};
}

}  // namespace

Result<std::unique_ptr<AddressedBuffer>> AddressedBuffer::create(ComputeContext& context, std::size_t bytes,
                                                                 Placement placement, const std::string& what) {
  if (!context.device_addresses_enabled()) {
    return make_error("Vulkan device " + context.facts().name +
                      " has no bufferDeviceAddress (Vulkan 1.2), which the GPU decoder needs: run with --gpu none");
  }
  std::unique_ptr<AddressedBuffer> buffer(new AddressedBuffer(context));
  if (Status s = buffer->init(std::max<std::size_t>(4, (bytes + 3) / 4 * 4), placement, what); !s) return s.error();
  return buffer;
}

Status AddressedBuffer::init(std::size_t bytes, Placement placement, const std::string& what) {
  const auto& fn = context_->fn();
  VkBufferCreateInfo info{VK_STRUCTURE_TYPE_BUFFER_CREATE_INFO};
  info.size = bytes;
  info.usage = kUsage;
  info.sharingMode = VK_SHARING_MODE_EXCLUSIVE;
  if (VkResult r = fn.vkCreateBuffer(context_->device(), &info, nullptr, &buffer_); r != VK_SUCCESS) {
    buffer_ = VK_NULL_HANDLE;
    return make_error(what + ": " + vulkan_call_failed("vkCreateBuffer", r).message);
  }
  VkMemoryRequirements needs{};
  fn.vkGetBufferMemoryRequirements(context_->device(), buffer_, &needs);
  std::optional<std::uint32_t> type;
  VkMemoryPropertyFlags flags = 0;
  for (VkMemoryPropertyFlags choice : memory_choices(*context_, placement)) {
    if (auto found = context_->find_memory_type(needs.memoryTypeBits, choice)) {
      type = *found;
      flags = context_->memory_properties().memoryTypes[*found].propertyFlags;
      break;
    }
  }
  if (!type) return make_error(what + ": Vulkan device " + context_->facts().name + " has no suitable memory type");
  const std::uint64_t free = context_->heap_budget_bytes(*type);
  if (needs.size > free) {
    return make_error(what + " needs " + format_bytes(needs.size) + " but the device's memory budget " +
                      "(VK_EXT_memory_budget) has " + format_bytes(free) +
                      " left: re-plan with a smaller --vram or fewer experts on the GPU");
  }
  VkMemoryAllocateFlagsInfo address_flags{VK_STRUCTURE_TYPE_MEMORY_ALLOCATE_FLAGS_INFO};
  address_flags.flags = VK_MEMORY_ALLOCATE_DEVICE_ADDRESS_BIT;
  VkMemoryAllocateInfo alloc{VK_STRUCTURE_TYPE_MEMORY_ALLOCATE_INFO};
  alloc.pNext = &address_flags;
  alloc.allocationSize = needs.size;
  alloc.memoryTypeIndex = *type;
  if (VkResult r = fn.vkAllocateMemory(context_->device(), &alloc, nullptr, &memory_); r != VK_SUCCESS) {
    memory_ = VK_NULL_HANDLE;
    return make_error(what + " (" + format_bytes(needs.size) + "): " + vulkan_call_failed("vkAllocateMemory", r).message);
  }
  if (VkResult r = fn.vkBindBufferMemory(context_->device(), buffer_, memory_, 0); r != VK_SUCCESS) {
    return make_error(what + ": " + vulkan_call_failed("vkBindBufferMemory", r).message);
  }
  if (flags & VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT) {
    if (VkResult r = fn.vkMapMemory(context_->device(), memory_, 0, VK_WHOLE_SIZE, 0, &mapped_); r != VK_SUCCESS) {
      mapped_ = nullptr;
      return make_error(what + ": " + vulkan_call_failed("vkMapMemory", r).message);
    }
  }
  device_local_ = (flags & VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT) != 0;
  size_ = bytes;
  address_ = context_->buffer_address(buffer_);
  return Ok{};
}

AddressedBuffer::~AddressedBuffer() {
  const auto& fn = context_->fn();
  if (mapped_) fn.vkUnmapMemory(context_->device(), memory_);
  if (buffer_) fn.vkDestroyBuffer(context_->device(), buffer_, nullptr);
  if (memory_) fn.vkFreeMemory(context_->device(), memory_, nullptr);
}

Result<std::unique_ptr<StagingRing>> StagingRing::create(ComputeContext& context, std::size_t bytes) {
  std::unique_ptr<StagingRing> ring(new StagingRing(context));
  if (Status s = ring->init(bytes); !s) return s.error();
  return ring;
}

Status StagingRing::init(std::size_t bytes) {
  half_bytes_ = std::max<std::size_t>(bytes / 2, 1 << 20) / 4096 * 4096;
  auto staging = AddressedBuffer::create(*context_, half_bytes_ * 2, Placement::host, "the upload staging ring");
  if (!staging) return staging.error();
  staging_ = std::move(*staging);
  const auto& fn = context_->fn();
  VkCommandPoolCreateInfo pool_info{VK_STRUCTURE_TYPE_COMMAND_POOL_CREATE_INFO};
  pool_info.flags = VK_COMMAND_POOL_CREATE_RESET_COMMAND_BUFFER_BIT;
  pool_info.queueFamilyIndex = context_->queue_family();
  if (VkResult r = fn.vkCreateCommandPool(context_->device(), &pool_info, nullptr, &pool_); r != VK_SUCCESS) {
    pool_ = VK_NULL_HANDLE;
    return vulkan_call_failed("vkCreateCommandPool", r);
  }
  VkCommandBufferAllocateInfo alloc{VK_STRUCTURE_TYPE_COMMAND_BUFFER_ALLOCATE_INFO};
  alloc.commandPool = pool_;
  alloc.level = VK_COMMAND_BUFFER_LEVEL_PRIMARY;
  alloc.commandBufferCount = 2;
  if (VkResult r = fn.vkAllocateCommandBuffers(context_->device(), &alloc, commands_); r != VK_SUCCESS) {
    return vulkan_call_failed("vkAllocateCommandBuffers", r);
  }
  for (VkFence& fence : fences_) {
    VkFenceCreateInfo fence_info{VK_STRUCTURE_TYPE_FENCE_CREATE_INFO};
    if (VkResult r = fn.vkCreateFence(context_->device(), &fence_info, nullptr, &fence); r != VK_SUCCESS) {
      fence = VK_NULL_HANDLE;
      return vulkan_call_failed("vkCreateFence", r);
    }
  }
  return Ok{};
}

StagingRing::~StagingRing() {
  const auto& fn = context_->fn();
  (void)finish();
  for (VkFence fence : fences_) {
    if (fence) fn.vkDestroyFence(context_->device(), fence, nullptr);
  }
  if (pool_) fn.vkDestroyCommandPool(context_->device(), pool_, nullptr);
}

Result<int> StagingRing::acquire() {
  const int half = next_;
  next_ = 1 - next_;
  if (pending_[half]) {
    const auto& fn = context_->fn();
    if (VkResult r = fn.vkWaitForFences(context_->device(), 1, &fences_[half], VK_TRUE, kWaitTimeoutNs); r != VK_SUCCESS) {
      return vulkan_call_failed("vkWaitForFences (upload)", r);
    }
    pending_[half] = false;
  }
  return half;
}

Status StagingRing::submit_copy(int half, AddressedBuffer& dst, std::size_t offset, std::size_t bytes) {
  const auto& fn = context_->fn();
  VkCommandBuffer cmd = commands_[half];
  fn.vkResetCommandBuffer(cmd, 0);
  VkCommandBufferBeginInfo begin{VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO};
  begin.flags = VK_COMMAND_BUFFER_USAGE_ONE_TIME_SUBMIT_BIT;
  fn.vkBeginCommandBuffer(cmd, &begin);
  VkBufferCopy region{static_cast<VkDeviceSize>(half) * half_bytes_, offset, bytes};
  fn.vkCmdCopyBuffer(cmd, staging_->handle(), dst.handle(), 1, &region);
  if (VkResult r = fn.vkEndCommandBuffer(cmd); r != VK_SUCCESS) return vulkan_call_failed("vkEndCommandBuffer", r);
  fn.vkResetFences(context_->device(), 1, &fences_[half]);
  VkSubmitInfo submit{VK_STRUCTURE_TYPE_SUBMIT_INFO};
  submit.commandBufferCount = 1;
  submit.pCommandBuffers = &cmd;
  if (VkResult r = fn.vkQueueSubmit(context_->queue(), 1, &submit, fences_[half]); r != VK_SUCCESS) {
    return vulkan_call_failed("vkQueueSubmit (upload)", r);
  }
  pending_[half] = true;
  return Ok{};
}

Status StagingRing::upload(AddressedBuffer& dst, std::size_t offset, std::span<const std::byte> data) {
  if (offset + data.size() > dst.size()) return make_error("upload past the end of a GPU buffer (a coli bug)");
  if (!dst.mapped().empty()) {
    std::memcpy(dst.mapped().data() + offset, data.data(), data.size());
    return Ok{};
  }
  for (std::size_t done = 0; done < data.size();) {
    const std::size_t chunk = std::min(half_bytes_, data.size() - done);
    auto half = acquire();
    if (!half) return half.error();
    std::memcpy(staging_->mapped().data() + static_cast<std::size_t>(*half) * half_bytes_, data.data() + done, chunk);
    if (Status s = submit_copy(*half, dst, offset + done, chunk); !s) return s;
    done += chunk;
  }
  return Ok{};
}

Status StagingRing::upload_from_file(AddressedBuffer& dst, std::size_t offset, const container::ContainerReader& file,
                                     std::uint64_t file_offset, std::size_t bytes) {
  if (offset + bytes > dst.size()) return make_error("upload past the end of a GPU buffer (a coli bug)");
  if (!dst.mapped().empty()) return file.read(file_offset, dst.mapped().subspan(offset, bytes));
  for (std::size_t done = 0; done < bytes;) {
    const std::size_t chunk = std::min(half_bytes_, bytes - done);
    auto half = acquire();
    if (!half) return half.error();
    const auto staging = staging_->mapped().subspan(static_cast<std::size_t>(*half) * half_bytes_, chunk);
    if (Status s = file.read(file_offset + done, staging); !s) return s;
    if (Status s = submit_copy(*half, dst, offset + done, chunk); !s) return s;
    done += chunk;
  }
  return Ok{};
}

Status StagingRing::finish() {
  const auto& fn = context_->fn();
  for (int half = 0; half < 2; ++half) {
    if (!pending_[half]) continue;
    if (VkResult r = fn.vkWaitForFences(context_->device(), 1, &fences_[half], VK_TRUE, kWaitTimeoutNs); r != VK_SUCCESS) {
      return vulkan_call_failed("vkWaitForFences (upload)", r);
    }
    pending_[half] = false;
  }
  return Ok{};
}

}  // namespace coli::vulkan
