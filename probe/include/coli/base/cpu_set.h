// A set of logical CPU OS indices, in the kernel's list syntax ("0-3,8,10-11").
// Used for affinity masks, cgroup cpusets, CPU kinds and thread placements.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "coli/base/result.h"

namespace coli {

class CpuSet {
 public:
  CpuSet() = default;
  explicit CpuSet(std::vector<int> cpus);  // sorted and deduplicated

  // Parses "0-3,8" (spaces and a trailing newline tolerated; "" is the empty set).
  static Result<CpuSet> parse(std::string_view list);
  // Parses a kernel/hwloc hex mask such as "0x0000ffff" or "ff,ffffffff".
  static Result<CpuSet> parse_hex_mask(std::string_view mask);

  std::string to_list() const;  // canonical "0-3,8"
  const std::vector<int>& cpus() const { return cpus_; }
  int size() const { return static_cast<int>(cpus_.size()); }
  bool empty() const { return cpus_.empty(); }
  bool contains(int cpu) const;

  CpuSet intersect(const CpuSet& other) const;
  CpuSet unite(const CpuSet& other) const;
  CpuSet minus(const CpuSet& other) const;
  bool is_subset_of(const CpuSet& other) const { return minus(other).empty(); }  // the empty set is one of every set

  bool operator==(const CpuSet&) const = default;

 private:
  std::vector<int> cpus_;
};

}  // namespace coli
