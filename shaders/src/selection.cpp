#include "coli/shaders/selection.h"

#include <algorithm>
#include <bit>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <vector>

namespace coli::shaders {
namespace {

constexpr std::uint32_t kLanesPerRowShmemX = 16;  // 64 contiguous weight bytes per q8 row step

std::string bytes(std::uint64_t n) { return std::to_string(n) + " B"; }

bool has_operation(const VulkanDevice& device, std::string_view operation) {
  return std::find(device.subgroup_operations.begin(), device.subgroup_operations.end(), operation) !=
         device.subgroup_operations.end();
}

// nullopt for a name this code does not know (treated as missing).
std::optional<bool> feature(const VulkanDevice& device, std::string_view name) {
  if (name == "shader_int8") return device.shader_int8;
  if (name == "shader_float16") return device.shader_float16;
  if (name == "storage_buffer_8bit") return device.storage_buffer_8bit;
  if (name == "storage_buffer_16bit") return device.storage_buffer_16bit;
  if (name == "integer_dot_product") return device.integer_dot_product;
  if (name == "cooperative_matrix") return device.cooperative_matrix;
  return std::nullopt;
}

// The most invocations one workgroup may have on this device (0 = unknown).
std::uint32_t workgroup_size_limit(const VulkanDevice& device) {
  std::uint32_t limit = device.max_workgroup_invocations;
  if (!device.max_workgroup_size.empty() && device.max_workgroup_size[0] != 0) {
    limit = limit == 0 ? device.max_workgroup_size[0] : std::min(limit, device.max_workgroup_size[0]);
  }
  return limit;
}

// 128 invocations (several rows in flight), at least one subgroup, within
// the device's limits, and a whole number of subgroups where possible.
std::uint32_t choose_workgroup_size(const VulkanDevice& device) {
  std::uint32_t size = std::max<std::uint32_t>(COLI_GEMV_DEFAULT_WORKGROUP_SIZE, device.subgroup_size);
  const std::uint32_t limit = workgroup_size_limit(device);
  if (limit != 0) size = std::min(size, limit);
  if (device.subgroup_size != 0 && size >= device.subgroup_size) size -= size % device.subgroup_size;
  return std::max<std::uint32_t>(size, 1);
}

// The largest power-of-two x tile with X_TILE + WORKGROUP_SIZE floats within
// `limit` bytes, no wider than the row needs, at least kMinXTile (which may
// then not fit: why_not_fits says so).
std::uint32_t choose_x_tile(std::uint32_t workgroup_size, std::uint32_t cols, std::uint32_t limit) {
  const std::uint64_t scratch = std::uint64_t{kSharedFloatBytes} * workgroup_size;
  const std::uint64_t budget_floats = limit > scratch ? (limit - scratch) / kSharedFloatBytes : 0;
  std::uint64_t tile = budget_floats == 0 ? 0 : std::bit_floor(budget_floats);
  tile = std::min<std::uint64_t>(tile, kMaxXTile);
  tile = std::min<std::uint64_t>(tile, std::max<std::uint32_t>(kMinXTile, std::bit_floor(cols)));
  return static_cast<std::uint32_t>(std::max<std::uint64_t>(tile, kMinXTile));
}

GemvSpec choose_spec(const ShaderVariant& variant, const VulkanDevice& device, const GemvShape& shape,
                     std::uint32_t limit) {
  GemvSpec spec;
  spec.workgroup_size = choose_workgroup_size(device);
  switch (variant.kind) {
    case VariantKind::direct:
    case VariantKind::tile64k:
      // One row per subgroup in a single pass.
      spec.rows_per_workgroup = std::max<std::uint32_t>(1, spec.workgroup_size / std::max<std::uint32_t>(1, device.subgroup_size));
      spec.x_tile = 0;
      break;
    case VariantKind::shmem_x:
      spec.rows_per_workgroup = std::max<std::uint32_t>(1, spec.workgroup_size / kLanesPerRowShmemX);
      spec.x_tile = choose_x_tile(spec.workgroup_size, shape.cols, limit);
      break;
  }
  return spec;
}

std::string spec_text(const ShaderVariant& variant, const GemvSpec& spec) {
  std::string text(variant.name);
  if (variant.kind == VariantKind::shmem_x) text += " with X_TILE=" + std::to_string(spec.x_tile);
  return text;
}

std::string limit_text(std::uint32_t limit, const VulkanDevice& device) {
  std::string text = bytes(limit) + " shared memory";
  if (limit != device.max_compute_shared_memory_bytes) {
    text += ", pretended by " + std::string(kEnvMaxSharedMemory) + "; the device allows " +
            bytes(device.max_compute_shared_memory_bytes);
  }
  return text;
}

Status check_shape(const GemvShape& shape) {
  if (shape.rows == 0 || shape.cols == 0) {
    return make_error("GEMV shape " + std::to_string(shape.rows) + "x" + std::to_string(shape.cols) +
                      " is empty; rows and cols must be positive");
  }
  if (!traits(shape.format).valid_cols(shape.cols)) {
    return make_error("q4_g64 needs cols to be a multiple of 64, got " + std::to_string(shape.cols));
  }
  return Ok{};
}

std::string known_names(WeightFormat format) {
  std::string names;
  for (const ShaderVariant& variant : gemv_catalogue()) {
    if (variant.format != format) continue;
    if (!names.empty()) names += ", ";
    names += variant.name;
  }
  return names;
}

Result<std::uint32_t> parse_size(std::string_view text) {
  std::uint64_t value = 0;
  const char* end = text.data() + text.size();
  auto [rest, error] = std::from_chars(text.data(), end, value);
  if (error != std::errc{} || rest == text.data()) return make_error("not a number");
  std::string_view suffix(rest, static_cast<std::size_t>(end - rest));
  if (suffix == "K" || suffix == "k" || suffix == "KiB") {
    value *= 1024;
  } else if (!suffix.empty()) {
    return make_error("unknown suffix '" + std::string(suffix) + "' (use bytes, or K / KiB)");
  }
  if (value > std::numeric_limits<std::uint32_t>::max()) return make_error("too large");
  return static_cast<std::uint32_t>(value);
}

}  // namespace

Result<SelectionOverrides> overrides_from_environment(const EnvReader& get_env) {
  auto read = [&](std::string_view name) -> std::string {
    const std::string key(name);
    const char* value = get_env ? get_env(key.c_str()) : std::getenv(key.c_str());
    return value == nullptr ? std::string() : std::string(value);
  };
  SelectionOverrides overrides;
  overrides.force_variant = read(kEnvForceVariant);
  const std::string limit = read(kEnvMaxSharedMemory);
  if (!limit.empty()) {
    Result<std::uint32_t> parsed = parse_size(limit);
    if (!parsed) {
      return make_error(std::string(kEnvMaxSharedMemory) + "=" + limit + ": " + parsed.error().message +
                        "; give bytes, e.g. 16384 or 16K");
    }
    overrides.max_shared_memory_bytes = *parsed;
  }
  return overrides;
}

std::string why_not_fits(const ShaderVariant& variant, const GemvSpec& spec, const VulkanDevice& device,
                         std::uint32_t shared_memory_limit) {
  const std::uint32_t shared = variant.shared_memory_bytes(spec);
  if (shared > shared_memory_limit) {
    return std::string(variant.name) + " needs " + bytes(shared) + " > " + bytes(shared_memory_limit) +
           " of shared memory";
  }
  const std::uint32_t size_limit = workgroup_size_limit(device);
  if (size_limit != 0 && spec.workgroup_size > size_limit) {
    return std::string(variant.name) + " needs a workgroup of " + std::to_string(spec.workgroup_size) +
           " invocations > " + std::to_string(size_limit) + " allowed";
  }
  for (std::string_view operation : variant.required_subgroup_operations) {
    if (!has_operation(device, operation)) {
      return std::string(variant.name) + " needs subgroup operation '" + std::string(operation) +
             "', which the device lacks in compute shaders";
    }
  }
  if (variant.min_subgroup_size != 0 || variant.max_subgroup_size != 0) {
    // Without size control the driver may use any size in [min, max].
    const std::uint32_t low = device.min_subgroup_size != 0 ? device.min_subgroup_size : device.subgroup_size;
    const std::uint32_t high = device.max_subgroup_size != 0 ? device.max_subgroup_size : device.subgroup_size;
    const bool too_small = variant.min_subgroup_size != 0 && low < variant.min_subgroup_size;
    const bool too_large = variant.max_subgroup_size != 0 && high > variant.max_subgroup_size;
    if (too_small || too_large) {
      return std::string(variant.name) + " needs subgroup sizes in [" + std::to_string(variant.min_subgroup_size) +
             ", " + std::to_string(variant.max_subgroup_size) + "], the device uses [" + std::to_string(low) +
             ", " + std::to_string(high) + "]";
    }
  }
  for (std::string_view name : variant.required_features) {
    if (feature(device, name) != std::optional<bool>(true)) {
      return std::string(variant.name) + " needs feature " + std::string(name) + ", which the device lacks";
    }
  }
  return {};
}

// GB/s of `variant` measured on `device` at the measured shape nearest to
// `shape` (by element count, on a log scale); 0 when it was never measured.
double measured_gb_per_s(const std::vector<GpuKernelResult>& measured, const VulkanDevice& device,
                         const ShaderVariant& variant, const GemvShape& shape) {
  double best_distance = 1e300, gb_per_s = 0;
  const double size = static_cast<double>(shape.rows) * shape.cols;
  for (const GpuKernelResult& result : measured) {
    if (result.backend != "vulkan" || result.device != device.name || result.variant != variant.name ||
        !result.passed || result.gb_per_s.samples == 0) {
      continue;
    }
    const double distance = std::fabs(std::log(static_cast<double>(result.rows) * result.cols / size));
    if (distance < best_distance) {
      best_distance = distance;
      gb_per_s = result.gb_per_s.median;
    }
  }
  return gb_per_s;
}

Result<Selection> select_gemv_variant(const VulkanDevice& device, const GemvShape& shape,
                                      const SelectionOverrides& overrides,
                                      const std::vector<GpuKernelResult>& measured) {
  if (Status shape_ok = check_shape(shape); !shape_ok) return shape_ok.error();
  std::uint32_t limit = device.max_compute_shared_memory_bytes;
  if (overrides.max_shared_memory_bytes) {
    if (*overrides.max_shared_memory_bytes > limit) {
      return make_error(std::string(kEnvMaxSharedMemory) + "=" + std::to_string(*overrides.max_shared_memory_bytes) +
                        " exceeds the " + bytes(limit) + " of shared memory " + device.name +
                        " allows; it may only lower the limit");
    }
    limit = *overrides.max_shared_memory_bytes;
  }

  auto make_selection = [&](const ShaderVariant& variant, const GemvSpec& spec, std::string reason) {
    Selection selection;
    selection.variant = &variant;
    selection.spec = spec;
    selection.shared_memory_bytes = variant.shared_memory_bytes(spec);
    selection.shared_memory_limit = limit;
    selection.workgroups = workgroup_count(shape.rows, spec);
    selection.reason = spec_text(variant, spec) + " (" + bytes(selection.shared_memory_bytes) + " of " +
                       limit_text(limit, device) + ")" + reason;
    return selection;
  };

  if (!overrides.force_variant.empty()) {
    const std::string source = "forced variant " + overrides.force_variant + " (" + std::string(kEnvForceVariant) + ")";
    const ShaderVariant* forced = find_variant(overrides.force_variant);
    if (forced == nullptr || forced->format != shape.format) {
      return make_error(source + " is not a " + std::string(name_of(shape.format)) +
                        " variant; known: " + known_names(shape.format));
    }
    const GemvSpec spec = choose_spec(*forced, device, shape, limit);
    if (std::string why = why_not_fits(*forced, spec, device, limit); !why.empty()) {
      std::string message = source + " refused on " + device.name + ": " + why;
      if (limit != device.max_compute_shared_memory_bytes) message += " (" + limit_text(limit, device) + ")";
      return make_error(message);
    }
    return make_selection(*forced, spec, "; forced by " + std::string(kEnvForceVariant));
  }

  // Measured variants first, fastest first; then the rest by static rank.
  struct Candidate {
    const ShaderVariant* variant;
    double gb_per_s;
  };
  std::vector<Candidate> candidates;
  for (const ShaderVariant& variant : gemv_catalogue()) {
    if (variant.format == shape.format) candidates.push_back({&variant, measured_gb_per_s(measured, device, variant, shape)});
  }
  std::stable_sort(candidates.begin(), candidates.end(), [](const Candidate& a, const Candidate& b) {
    if ((a.gb_per_s > 0) != (b.gb_per_s > 0)) return a.gb_per_s > 0;
    return a.gb_per_s > 0 ? a.gb_per_s > b.gb_per_s : a.variant->speed_rank > b.variant->speed_rank;
  });
  std::string passed_over;  // why each better-ordered variant was not chosen
  for (const Candidate& candidate : candidates) {
    const GemvSpec spec = choose_spec(*candidate.variant, device, shape, limit);
    std::string why = why_not_fits(*candidate.variant, spec, device, limit);
    if (why.empty()) {
      if (candidate.gb_per_s > 0) {
        char measured_text[96];
        std::snprintf(measured_text, sizeof measured_text, "; fastest measured on this device: %.1f GB/s",
                      candidate.gb_per_s);
        passed_over += measured_text;
      }
      return make_selection(*candidate.variant, spec, passed_over);
    }
    passed_over += "; " + why;
  }
  return make_error("no " + std::string(name_of(shape.format)) + " GEMV variant fits " + device.name + " (" +
                    limit_text(limit, device) + ")" + passed_over);
}

}  // namespace coli::shaders
