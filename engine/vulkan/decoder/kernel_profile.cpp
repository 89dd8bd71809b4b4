#include "vulkan/decoder/kernel_profile.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace coli::vulkan {

std::unique_ptr<KernelProfile> KernelProfile::from_environment(ComputeContext& context) {
  const char* flag = std::getenv("COLI_GPU_PROFILE");
  if (!flag || std::strcmp(flag, "1") != 0 || !context.has_timestamps()) return nullptr;
  std::unique_ptr<KernelProfile> profile(new KernelProfile(context));
  VkQueryPoolCreateInfo info{VK_STRUCTURE_TYPE_QUERY_POOL_CREATE_INFO};
  info.queryType = VK_QUERY_TYPE_TIMESTAMP;
  info.queryCount = kQueries;
  if (context.fn().vkCreateQueryPool(context.device(), &info, nullptr, &profile->pool_) != VK_SUCCESS) return nullptr;
  profile->labels_.resize(kQueries);
  return profile;
}

KernelProfile::~KernelProfile() {
  if (!totals_.empty()) std::fprintf(stderr, "%s", report().c_str());
  if (pool_) context_->fn().vkDestroyQueryPool(context_->device(), pool_, nullptr);
}

std::uint32_t KernelProfile::begin_segment(VkCommandBuffer cmd) {
  const std::uint32_t first = next_;
  if (next_ + 1 >= kQueries) return first;  // out of queries: later segments go unprofiled
  context_->fn().vkCmdResetQueryPool(cmd, pool_, first, kQueries - first);
  stamp(cmd, "");
  return first;
}

void KernelProfile::stamp(VkCommandBuffer cmd, const std::string& label) {
  if (next_ >= kQueries) return;
  context_->fn().vkCmdWriteTimestamp(cmd, VK_PIPELINE_STAGE_BOTTOM_OF_PIPE_BIT, pool_, next_);
  labels_[next_++] = label;
}

void KernelProfile::collect(std::uint32_t first, std::uint32_t end) {
  if (end <= first + 1) return;
  std::vector<std::uint64_t> ticks(end - first);
  if (context_->fn().vkGetQueryPoolResults(context_->device(), pool_, first, end - first, ticks.size() * 8, ticks.data(),
                                           8, VK_QUERY_RESULT_64_BIT | VK_QUERY_RESULT_WAIT_BIT) != VK_SUCCESS) {
    return;
  }
  const double seconds_per_tick = context_->timestamp_period_ns() * 1e-9;
  for (std::uint32_t i = 1; i < ticks.size(); ++i) {
    Total& t = totals_[labels_[first + i]];
    t.seconds += static_cast<double>(ticks[i] - ticks[i - 1]) * seconds_per_tick;
    ++t.calls;
  }
}

std::string KernelProfile::report() const {
  double all = 0;
  for (const auto& [label, t] : totals_) all += t.seconds;
  std::vector<std::pair<std::string, Total>> rows(totals_.begin(), totals_.end());
  std::sort(rows.begin(), rows.end(), [](const auto& a, const auto& b) { return a.second.seconds > b.second.seconds; });
  std::string out = "GPU time by kernel (COLI_GPU_PROFILE=1):\n";
  char line[200];
  for (const auto& [label, t] : rows) {
    std::snprintf(line, sizeof line, "  %-36s %9.2f ms %5.1f%%  %8llu calls  %8.2f us/call\n", label.c_str(),
                  t.seconds * 1e3, all > 0 ? 100 * t.seconds / all : 0, static_cast<unsigned long long>(t.calls),
                  t.calls ? t.seconds / static_cast<double>(t.calls) * 1e6 : 0);
    out += line;
  }
  return out;
}

}  // namespace coli::vulkan
