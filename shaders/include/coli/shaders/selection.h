// Choosing a GEMV shader variant for a device: a pure function of the
// device's facts, the operation's shape and the user's overrides. It never
// returns a variant that does not fit the device (shared memory, workgroup
// size, subgroup operations and sizes, features); the Vulkan driver is not
// trusted to refuse one (an H200 accepts a pipeline declaring more shared
// memory than its 48 KiB limit and then loses the device).
//
// Overrides (docs/shaders.md), read from the environment in one place,
// overrides_from_environment():
//   COLI_VK_FORCE_VARIANT=<name>     use this catalogue variant, e.g.
//                                    gemv_q4_g64_shmem_x. Refused with an
//                                    error when it does not fit the device or
//                                    is for the other weight format; never
//                                    run anyway.
//   COLI_VK_MAX_SHARED_MEMORY=<n>    pretend the device allows at most n bytes
//                                    of shared memory (suffix K or KiB for
//                                    1024s: 16K, 16KiB). It may only lower the
//                                    real limit; a larger value is an error.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "coli/base/result.h"
#include "coli/probe/device_profile.h"
#include "coli/shaders/catalogue.h"

namespace coli::shaders {

struct GemvShape {
  WeightFormat format = WeightFormat::q8_row;
  std::uint32_t rows = 0;
  std::uint32_t cols = 0;  // q4_g64: a multiple of 64
};

struct SelectionOverrides {
  std::string force_variant;                              // "" = choose
  std::optional<std::uint32_t> max_shared_memory_bytes;   // pretend limit
};

inline constexpr std::string_view kEnvForceVariant = "COLI_VK_FORCE_VARIANT";
inline constexpr std::string_view kEnvMaxSharedMemory = "COLI_VK_MAX_SHARED_MEMORY";

// Reads the two variables through `get_env` (std::getenv by default; tests
// pass a map). Unset or empty variables leave the field at its default; a
// malformed size is an error naming the variable and the value.
using EnvReader = std::function<const char*(const char*)>;
Result<SelectionOverrides> overrides_from_environment(const EnvReader& get_env = {});

struct Selection {
  const ShaderVariant* variant = nullptr;  // points into gemv_catalogue()
  GemvSpec spec;                           // values for its spec constants
  std::uint32_t shared_memory_bytes = 0;   // variant->shared_memory_bytes(spec)
  std::uint32_t shared_memory_limit = 0;   // the limit it was fitted to (pretended or real)
  std::uint32_t workgroups = 0;            // workgroup_count(rows, spec)
  // One line: what was chosen, its shared memory against the limit, and why
  // better-ranked variants were not, e.g. "gemv_q4_g64_shmem_x with
  // X_TILE=8192 (33280 B of 49152 B shared memory); gemv_q4_g64_tile64k
  // needs 65536 B > 49152 B".
  std::string reason;
};

// `measured`: self-test results (DeviceProfile::measurements.gpu_kernels).
// Variants measured on this device (passed, timed) are ordered by their GB/s
// at the measured shape closest to `shape`, ahead of the catalogue's static
// ranks: estimate first, measure when you can (design.md #5).
//
// Errors: a shape the format cannot hold (zero size, q4 cols % 64 != 0), an
// unknown or unfitting forced variant, a pretend limit above the real one,
// or no variant fitting at all (each variant's reason is listed).
Result<Selection> select_gemv_variant(const VulkanDevice& device, const GemvShape& shape,
                                      const SelectionOverrides& overrides = {},
                                      const std::vector<GpuKernelResult>& measured = {});

// Whether `variant` with `spec` fits `device` under `shared_memory_limit`
// bytes: "" when it does, else why not (naming both numbers). Used by the
// selector; public so a runner or test can check any pairing.
std::string why_not_fits(const ShaderVariant& variant, const GemvSpec& spec,
                         const VulkanDevice& device, std::uint32_t shared_memory_limit);

}  // namespace coli::shaders
