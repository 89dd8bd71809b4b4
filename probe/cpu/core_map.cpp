#include "cpu/core_map.h"

#include <algorithm>

namespace coli::probe {

std::vector<CpuSet> cores_of(const CpuKind& kind) {
  if (!kind.core_pus.empty()) return kind.core_pus;
  const auto& pus = kind.pus.cpus();
  const size_t width = kind.cores > 0 && kind.pus.size() > kind.cores
                           ? static_cast<size_t>((kind.pus.size() + kind.cores - 1) / kind.cores)
                           : 1;
  std::vector<CpuSet> cores;
  for (size_t start = 0; start < pus.size(); start += width) {
    const size_t end = std::min(start + width, pus.size());
    cores.emplace_back(std::vector<int>(pus.begin() + static_cast<std::ptrdiff_t>(start),
                                        pus.begin() + static_cast<std::ptrdiff_t>(end)));
  }
  return cores;
}

std::vector<int> first_usable_pu_per_core(const CpuKind& kind, const CpuSet& usable) {
  std::vector<int> chosen;
  for (const CpuSet& core : cores_of(kind)) {
    const CpuSet allowed = core.intersect(usable);
    if (!allowed.empty()) chosen.push_back(allowed.cpus().front());
  }
  return chosen;
}

}  // namespace coli::probe
