// Where the GPU decoder's time goes: with COLI_GPU_PROFILE=1 every recorded
// dispatch is followed by a timestamp, and each submission's stamps are read
// back and summed per kernel label; the table is printed to stderr when the
// decoder goes away. Off by default: the stamps serialise the queue a little.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "vulkan/compute_context.h"

namespace coli::vulkan {

class KernelProfile {
 public:
  // Enabled when COLI_GPU_PROFILE=1 and the queue has timestamps.
  static std::unique_ptr<KernelProfile> from_environment(ComputeContext& context);
  ~KernelProfile();

  // Recording: the first stamp of a command buffer resets its queries.
  std::uint32_t begin_segment(VkCommandBuffer cmd);
  void stamp(VkCommandBuffer cmd, const std::string& label);
  std::uint32_t end_segment() const { return next_; }  // one past the segment's last query
  // After the segment [first, end) has run: add its durations to the totals.
  void collect(std::uint32_t first, std::uint32_t end);
  std::string report() const;

 private:
  explicit KernelProfile(ComputeContext& context) : context_(&context) {}
  static constexpr std::uint32_t kQueries = 16384;

  ComputeContext* context_;
  VkQueryPool pool_ = VK_NULL_HANDLE;
  std::uint32_t next_ = 0;
  std::vector<std::string> labels_;  // per query: the dispatch it closes
  struct Total {
    double seconds = 0;
    std::uint64_t calls = 0;
  };
  std::map<std::string, Total> totals_;
};

}  // namespace coli::vulkan
