#include <cstdio>
#include <string>

#include "vulkan/gpu_selftest.h"

namespace coli::vulkan {
namespace {

std::string cell(const char* format, double value) {
  char text[64];
  std::snprintf(text, sizeof text, format, value);
  return text;
}

std::string pad(std::string text, std::size_t width) {
  if (text.size() < width) text.append(width - text.size(), ' ');
  return text;
}

std::string status_of(const GpuKernelResult& result) {
  if (result.variant.empty()) return "-";
  if (result.note.rfind("skipped", 0) == 0) return "skip";
  return result.passed ? "pass" : "FAIL";
}

}  // namespace

std::string format_selftest_table(const std::vector<GpuKernelResult>& results) {
  std::string out = pad("device", 28) + pad("variant", 24) + pad("rows x cols", 13) + pad("shmem B", 9) +
                    pad("result", 7) + pad("max rel err", 12) + pad("GB/s median (best)", 20) + "note\n";
  for (const GpuKernelResult& r : results) {
    std::string line = pad(r.device.empty() ? "(none)" : r.device.substr(0, 27), 28);
    line += pad(r.variant.empty() ? "-" : r.variant, 24);
    line += pad(r.rows > 0 ? std::to_string(r.rows) + "x" + std::to_string(r.cols) : "-", 13);
    line += pad(r.variant.empty() ? "-" : std::to_string(r.shared_memory_bytes), 9);
    line += pad(status_of(r), 7);
    const bool ran = !r.variant.empty() && r.note.rfind("skipped", 0) != 0;
    line += pad(ran ? cell("%.2e", r.max_relative_error) : "-", 12);
    line += pad(r.gb_per_s.samples > 0 ? cell("%.1f", r.gb_per_s.median) + " (" + cell("%.1f", r.gb_per_s.best) + ")"
                                       : "-",
                20);
    out += line + r.note + "\n";
  }
  return out;
}

}  // namespace coli::vulkan
