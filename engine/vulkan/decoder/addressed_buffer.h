// Buffers the decoder's kernels reach by device address, and the staging
// ring that fills them. Where a device has device-local memory the host
// cannot map (a discrete GPU's HBM), weights and activations live there and
// uploads go through the ring; on unified memory (integrated GPUs, lavapipe)
// the buffer itself is mapped and written in place. Host-placed buffers
// (per-token input, logits, routing read back for the CPU) are always mapped.
// Every allocation is checked against VK_EXT_memory_budget first, so an
// oversized plan is refused with numbers instead of failing mid-run.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>

#include "coli/container/container.h"
#include "vulkan/compute_context.h"

namespace coli::vulkan {

enum class Placement { device, host };

class AddressedBuffer {
 public:
  // `what` names the buffer in errors ("expert slots of MoE layer 3").
  static Result<std::unique_ptr<AddressedBuffer>> create(ComputeContext& context, std::size_t bytes, Placement placement,
                                                         const std::string& what);
  ~AddressedBuffer();
  AddressedBuffer(const AddressedBuffer&) = delete;
  AddressedBuffer& operator=(const AddressedBuffer&) = delete;

  VkBuffer handle() const { return buffer_; }
  VkDeviceAddress address() const { return address_; }
  std::size_t size() const { return size_; }
  // Host view of a mapped buffer; empty when the host cannot map it.
  std::span<std::byte> mapped() const { return {static_cast<std::byte*>(mapped_), mapped_ ? size_ : 0}; }
  // True when its memory is device-local (VRAM on a discrete GPU).
  bool device_local() const { return device_local_; }

 private:
  explicit AddressedBuffer(ComputeContext& context) : context_(&context) {}
  Status init(std::size_t bytes, Placement placement, const std::string& what);

  ComputeContext* context_;
  VkBuffer buffer_ = VK_NULL_HANDLE;
  VkDeviceMemory memory_ = VK_NULL_HANDLE;
  VkDeviceAddress address_ = 0;
  void* mapped_ = nullptr;
  std::size_t size_ = 0;
  bool device_local_ = false;
};

// Double-buffered staging: the host fills one half while the queue copies
// the other, so a load streams at the link's speed without waiting per
// chunk. Buffers the host can map are written directly and skip the ring.
class StagingRing {
 public:
  static Result<std::unique_ptr<StagingRing>> create(ComputeContext& context, std::size_t bytes);
  ~StagingRing();
  StagingRing(const StagingRing&) = delete;
  StagingRing& operator=(const StagingRing&) = delete;

  // dst[offset, offset + bytes) = data.
  Status upload(AddressedBuffer& dst, std::size_t offset, std::span<const std::byte> data);
  // dst[offset, offset + bytes) = the container's bytes at file_offset (read
  // straight into the staging memory or the mapped buffer: no host copy in between).
  Status upload_from_file(AddressedBuffer& dst, std::size_t offset, const container::ContainerReader& file,
                          std::uint64_t file_offset, std::size_t bytes);
  // Waits until every copy handed to the queue has finished.
  Status finish();
  std::size_t bytes() const { return half_bytes_ * 2; }

 private:
  explicit StagingRing(ComputeContext& context) : context_(&context) {}
  Status init(std::size_t bytes);
  // A half ready for the host to fill (waits for its previous copy).
  Result<int> acquire();
  Status submit_copy(int half, AddressedBuffer& dst, std::size_t offset, std::size_t bytes);

  ComputeContext* context_;
  std::unique_ptr<AddressedBuffer> staging_;
  std::size_t half_bytes_ = 0;
  VkCommandPool pool_ = VK_NULL_HANDLE;
  VkCommandBuffer commands_[2] = {VK_NULL_HANDLE, VK_NULL_HANDLE};
  VkFence fences_[2] = {VK_NULL_HANDLE, VK_NULL_HANDLE};
  bool pending_[2] = {false, false};
  int next_ = 0;
};

}  // namespace coli::vulkan
