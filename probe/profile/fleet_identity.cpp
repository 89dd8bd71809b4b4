// The equivalence class (docs/fleet.md): which machines may share tuned
// results. One list of fields is both the hashed basis and the field-by-field
// report, so what is compared and what is shown cannot drift apart.
#include <cstdio>

#include "coli/probe/fleet.h"

namespace coli::fleet {
namespace {

constexpr std::uint32_t kNvidiaVendorId = 0x10de;

std::string join(const std::vector<std::string>& items) {
  std::string out;
  for (const std::string& item : items) out += (out.empty() ? "" : ",") + item;
  return out;
}

std::string hex_ids(std::uint32_t vendor, std::uint32_t device) {
  char ids[32];
  std::snprintf(ids, sizeof ids, "%04x:%04x", vendor, device);
  return ids;
}

void add(std::vector<ClassField>& fields, std::string field, std::string value, std::string shown = {}) {
  if (shown.empty()) shown = value;
  fields.push_back(ClassField{std::move(field), std::move(value), std::move(shown)});
}

// Multi-GPU plans depend on how the GPUs are wired: two machines with the
// same GPUs joined differently are not one class. In: each device's NUMA node
// and each pair's path and link count. Out: bus ids and bandwidths (spec or
// measured), which differ between identical machines. Only with 2+ CUDA
// devices, so one-GPU classes stay as they were.
void add_gpu_topology(std::vector<ClassField>& fields, const GpuFacts& gpus) {
  if (gpus.cuda.size() < 2) return;
  for (std::size_t i = 0; i < gpus.cuda.size(); ++i) {
    add(fields, "gpus.cuda[" + std::to_string(i) + "].numa_node", std::to_string(gpus.cuda[i].numa_node));
  }
  add(fields, "gpus.links", std::to_string(gpus.links.size()));
  for (const GpuLink& link : gpus.links) {
    add(fields, "gpus.links[" + std::to_string(link.a) + "-" + std::to_string(link.b) + "]",
        link.path + "x" + std::to_string(link.nvlinks), link.path + " (" + std::to_string(link.nvlinks) + " NVLinks)");
  }
}

}  // namespace

int cuda_driver_major(int driver_version) { return driver_version / 1000; }

std::string cuda_driver_text(int driver_version) {
  return std::to_string(driver_version / 1000) + "." + std::to_string(driver_version % 1000 / 10);
}

int vulkan_driver_major(std::uint32_t vendor_id, std::uint32_t driver_version) {
  // NVIDIA packs major.minor.sub.patch as 10.8.8.6 bits; everyone else on
  // Linux (Mesa, AMDVLK, lavapipe) uses VK_MAKE_API_VERSION (major in 22-28).
  if (vendor_id == kNvidiaVendorId) return static_cast<int>(driver_version >> 22);
  return static_cast<int>((driver_version >> 22) & 0x7f);
}

std::vector<ClassField> class_fields(const DeviceProfile& profile, std::string_view kernel_catalogue) {
  const CpuFacts& cpu = profile.cpu;
  std::vector<ClassField> fields;
  add(fields, "cpu.arch", cpu.arch);
  add(fields, "cpu.vendor", cpu.vendor);
  add(fields, "cpu.model", cpu.model);
  add(fields, "cpu.packages", std::to_string(cpu.packages));
  add(fields, "cpu.isa", join(cpu.isa));
  add(fields, "cpu.kinds", std::to_string(cpu.kinds.size()));
  for (std::size_t i = 0; i < cpu.kinds.size(); ++i) {
    const CpuKind& kind = cpu.kinds[i];
    const std::string at = "cpu.kinds[" + std::to_string(i) + "].";
    add(fields, at + "core_type", kind.core_type);
    add(fields, at + "cores", std::to_string(kind.cores));
    add(fields, at + "pus", std::to_string(kind.pus.size()));
  }
  add(fields, "gpus.vulkan", std::to_string(profile.gpus.vulkan.size()));
  for (std::size_t i = 0; i < profile.gpus.vulkan.size(); ++i) {
    const VulkanDevice& gpu = profile.gpus.vulkan[i];
    const std::string at = "gpus.vulkan[" + std::to_string(i) + "].";
    add(fields, at + "name", gpu.name + "@" + hex_ids(gpu.vendor_id, gpu.device_id));
    const int major = vulkan_driver_major(gpu.vendor_id, gpu.driver_version);
    add(fields, at + "driver_version", std::to_string(major),
        std::to_string(major) + " (raw " + std::to_string(gpu.driver_version) + ")");
  }
  add(fields, "gpus.cuda", std::to_string(profile.gpus.cuda.size()));
  for (std::size_t i = 0; i < profile.gpus.cuda.size(); ++i) {
    const CudaDevice& gpu = profile.gpus.cuda[i];
    const std::string at = "gpus.cuda[" + std::to_string(i) + "].";
    add(fields, at + "name", gpu.name + "@sm_" + std::to_string(gpu.compute_capability_major) +
                                 std::to_string(gpu.compute_capability_minor));
    add(fields, at + "driver_version", std::to_string(cuda_driver_major(gpu.driver_version)),
        cuda_driver_text(gpu.driver_version));
  }
  add_gpu_topology(fields, profile.gpus);
  add(fields, "identity.kernel_catalogue", std::string(kernel_catalogue));
  return fields;
}

void assign_identity(DeviceProfile& profile, std::string_view kernel_catalogue) {
  std::string basis;
  for (const ClassField& field : class_fields(profile, kernel_catalogue)) {
    basis += (basis.empty() ? "" : ";") + field.field + "=" + field.class_value;
  }
  profile.identity.kernel_catalogue = std::string(kernel_catalogue);
  profile.identity.class_basis = basis;
  profile.identity.equivalence_class = std::string(kClassVersion) + ":" + fnv1a64_hex(basis);
}

std::string identity_problem(const DeviceProfile& profile) {
  const FleetIdentity& stored = profile.identity;
  if (stored.equivalence_class.empty()) return {};  // no class: shares nothing, but is not wrong
  if (!stored.equivalence_class.starts_with(std::string(kClassVersion) + ":")) {
    return "identity.equivalence_class '" + stored.equivalence_class + "' is not a " + std::string(kClassVersion) +
           " class this build understands";
  }
  DeviceProfile recomputed = profile;
  assign_identity(recomputed, stored.kernel_catalogue);
  if (recomputed.identity.class_basis != stored.class_basis) {
    return "identity.class_basis does not describe the file's own facts (expected '" +
           recomputed.identity.class_basis + "')";
  }
  if (recomputed.identity.equivalence_class != stored.equivalence_class) {
    return "identity.equivalence_class " + stored.equivalence_class + " is not the hash of its class_basis (" +
           recomputed.identity.equivalence_class + ")";
  }
  return {};
}

std::string FieldDifference::line() const {
  return field + ": profile " + profile_value + ", this machine " + live_value;
}

}  // namespace coli::fleet
