// Vulkan probe: live on this machine's driver (lavapipe on the dev VM and in
// CI), without a loader, and the pure pieces (subgroup names, budgets, the
// unified-memory rule) on hand-made inputs.
#include "gpu/vulkan_probe.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <optional>
#include <sstream>

#include "coli/probe/profile_io.h"

namespace coli::probe {
namespace {

// Sets an environment variable for one test and restores it afterwards.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old;
    ::setenv(name, value, 1);
  }
  ~ScopedEnv() {
    if (old_) {
      ::setenv(name_, old_->c_str(), 1);
    } else {
      ::unsetenv(name_);
    }
  }

 private:
  const char* name_;
  std::optional<std::string> old_;
};

const VulkanDevice* find_cpu_device(const VulkanProbeResult& result) {
  for (const VulkanDevice& device : result.devices) {
    if (device.type == "cpu") return &device;
  }
  return nullptr;
}

TEST(VulkanProbe, LiveProbeReadsTheCpuDevice) {
  const VulkanProbeResult result = probe_vulkan();
  if (result.status.rfind("no Vulkan loader", 0) == 0) GTEST_SKIP() << "no Vulkan loader here: " << result.status;
  ASSERT_FALSE(result.devices.empty()) << result.status;
  EXPECT_EQ(result.status, std::to_string(result.devices.size()) + (result.devices.size() == 1 ? " device" : " devices"));
  const VulkanDevice* cpu = find_cpu_device(result);
  if (!cpu) GTEST_SKIP() << "no CPU Vulkan device (install mesa-vulkan-drivers for lavapipe): " << result.status;
  EXPECT_FALSE(cpu->name.empty());
  EXPECT_GT(cpu->max_compute_shared_memory_bytes, 0u);
  EXPECT_GT(cpu->subgroup_size, 0u);
  EXPECT_LE(cpu->min_subgroup_size, cpu->subgroup_size);
  EXPECT_GE(cpu->max_subgroup_size, cpu->subgroup_size);
  EXPECT_EQ(cpu->max_workgroup_size.size(), 3u);
  EXPECT_EQ(cpu->max_workgroup_count.size(), 3u);
  EXPECT_GT(cpu->max_workgroup_invocations, 0u);
  EXPECT_GT(cpu->max_storage_buffer_range, 0u);
  EXPECT_EQ(cpu->uuid.size(), 32u);
  EXPECT_EQ(cpu->uuid.find_first_not_of("0123456789abcdef"), std::string::npos) << cpu->uuid;
  EXPECT_FALSE(cpu->subgroup_operations.empty());
  EXPECT_EQ(cpu->subgroup_operations.front(), "basic");
  ASSERT_FALSE(cpu->heaps.empty());
  EXPECT_GT(cpu->heaps.front().size_bytes, 0u);
  // A CPU device's memory is the host's: the unified-memory rule must say so.
  EXPECT_TRUE(cpu->unified_memory);
}

TEST(VulkanProbe, MissingLoaderIsAStatusNotAFailure) {
  ScopedEnv env("COLI_VULKAN_LIBRARY", "/nonexistent/libvulkan.so.1");
  const VulkanProbeResult result = probe_vulkan();
  EXPECT_EQ(result.status.rfind("no Vulkan loader (", 0), 0u) << result.status;
  EXPECT_NE(result.status.find("/nonexistent/libvulkan.so.1"), std::string::npos) << result.status;
  EXPECT_TRUE(result.devices.empty());
}

// The lavapipe record was transcribed from vulkaninfo; where this machine
// runs the same lavapipe, the probe must read exactly what was transcribed.
TEST(VulkanProbe, LavapipeRecordMatchesTheLiveProbe) {
  const std::string path = std::string(COLI_FIXTURES_DIR) + "/gpus/lavapipe/gpus.toml";
  std::ifstream file(path);
  ASSERT_TRUE(file) << path;
  std::stringstream text;
  text << file.rdbuf();
  auto recorded = parse_gpu_record(text.str(), path);
  ASSERT_TRUE(recorded) << recorded.error().message;
  ASSERT_EQ(recorded->vulkan.size(), 1u);
  VulkanDevice expected = recorded->vulkan.front();

  const VulkanProbeResult result = probe_vulkan();
  const VulkanDevice* live = find_cpu_device(result);
  if (!live || live->name != expected.name || live->driver_info != expected.driver_info) {
    GTEST_SKIP() << "this machine does not run the recorded " << expected.name << " (" << result.status << ")";
  }
  VulkanDevice actual = *live;
  // Heap sizes follow the host's memory in newer Mesa; compare their shape only.
  ASSERT_EQ(actual.heaps.size(), expected.heaps.size());
  for (std::size_t i = 0; i < actual.heaps.size(); ++i) {
    EXPECT_EQ(actual.heaps[i].device_local, expected.heaps[i].device_local);
  }
  actual.heaps.clear();
  expected.heaps.clear();
  EXPECT_EQ(actual, expected);
}

TEST(VulkanProbe, SubgroupOperationNamesFollowTheBits) {
  EXPECT_TRUE(subgroup_operation_names(0).empty());
  EXPECT_EQ(subgroup_operation_names(VK_SUBGROUP_FEATURE_BASIC_BIT | VK_SUBGROUP_FEATURE_SHUFFLE_RELATIVE_BIT |
                                     VK_SUBGROUP_FEATURE_QUAD_BIT),
            (std::vector<std::string>{"basic", "shuffle_relative", "quad"}));
  EXPECT_EQ(subgroup_operation_names(0xff).size(), 8u);
  // Bits beyond the eight named ones (e.g. NV partitioned, 0x100) are not reported.
  EXPECT_EQ(subgroup_operation_names(0x100), std::vector<std::string>{});
}

VkPhysicalDeviceMemoryProperties two_heaps() {
  VkPhysicalDeviceMemoryProperties memory{};
  memory.memoryHeapCount = 2;
  memory.memoryHeaps[0] = {8ull << 30, VK_MEMORY_HEAP_DEVICE_LOCAL_BIT};
  memory.memoryHeaps[1] = {16ull << 30, 0};
  memory.memoryTypeCount = 2;
  memory.memoryTypes[0] = {VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT, 0};
  memory.memoryTypes[1] = {VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT | VK_MEMORY_PROPERTY_HOST_COHERENT_BIT, 1};
  return memory;
}

TEST(VulkanProbe, BudgetAboveTheHeapIsClampedAndFlagged) {
  const VkPhysicalDeviceMemoryProperties memory = two_heaps();
  VkPhysicalDeviceMemoryBudgetPropertiesEXT budget{};
  budget.heapBudget[0] = 9ull << 30;  // more than the 8 GiB heap
  budget.heapUsage[0] = 1ull << 30;
  budget.heapBudget[1] = 12ull << 30;
  const std::vector<VulkanMemoryHeap> heaps = memory_heaps(memory, &budget);
  ASSERT_EQ(heaps.size(), 2u);
  EXPECT_TRUE(heaps[0].device_local);
  EXPECT_EQ(heaps[0].budget_bytes, 8ull << 30);
  EXPECT_TRUE(heaps[0].budget_clamped);
  EXPECT_EQ(heaps[0].usage_bytes, 1ull << 30);
  EXPECT_FALSE(heaps[1].device_local);
  EXPECT_EQ(heaps[1].budget_bytes, 12ull << 30);
  EXPECT_FALSE(heaps[1].budget_clamped);

  const std::vector<VulkanMemoryHeap> without_budget = memory_heaps(memory, nullptr);
  EXPECT_FALSE(without_budget[0].budget_bytes.has_value());
  EXPECT_FALSE(without_budget[0].usage_bytes.has_value());
}

TEST(VulkanProbe, UnifiedMemoryNeedsAnIntegratedDeviceAndHostVisibleDeviceMemory) {
  VkPhysicalDeviceMemoryProperties memory = two_heaps();
  EXPECT_FALSE(has_unified_memory(memory, VK_PHYSICAL_DEVICE_TYPE_INTEGRATED_GPU));  // no shared type yet
  // A device-local, host-visible type over heap 0: resizable BAR on a
  // discrete card, the normal case on an integrated one.
  memory.memoryTypes[memory.memoryTypeCount++] = {
      VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT | VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT, 0};
  EXPECT_FALSE(has_unified_memory(memory, VK_PHYSICAL_DEVICE_TYPE_DISCRETE_GPU));
  EXPECT_TRUE(has_unified_memory(memory, VK_PHYSICAL_DEVICE_TYPE_INTEGRATED_GPU));
  EXPECT_TRUE(has_unified_memory(memory, VK_PHYSICAL_DEVICE_TYPE_CPU));
  // The same flags pointing at a heap that is not device-local do not count.
  memory.memoryTypes[memory.memoryTypeCount - 1].heapIndex = 1;
  EXPECT_FALSE(has_unified_memory(memory, VK_PHYSICAL_DEVICE_TYPE_INTEGRATED_GPU));
}

TEST(VulkanProbe, IdentityTexts) {
  EXPECT_EQ(vulkan_version_text(VK_MAKE_API_VERSION(0, 1, 3, 230)), "1.3.230");
  EXPECT_EQ(vulkan_version_text(VK_MAKE_API_VERSION(0, 1, 4, 312)), "1.4.312");
  EXPECT_EQ(device_type_name(VK_PHYSICAL_DEVICE_TYPE_DISCRETE_GPU), "discrete");
  EXPECT_EQ(device_type_name(VK_PHYSICAL_DEVICE_TYPE_CPU), "cpu");
  EXPECT_EQ(device_type_name(static_cast<VkPhysicalDeviceType>(42)), "other");
  const std::uint8_t uuid[VK_UUID_SIZE] = {0x6d, 0x65, 0x73, 0x61, 0x32, 0x32, 0x2e, 0x33,
                                           0x2e, 0x36, 0x00, 0x00, 0x00, 0x00, 0x00, 0xff};
  EXPECT_EQ(uuid_hex(uuid), "6d65736132322e332e360000000000ff");
}

}  // namespace
}  // namespace coli::probe
