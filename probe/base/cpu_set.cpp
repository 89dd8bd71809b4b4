#include "coli/base/cpu_set.h"

#include <algorithm>
#include <cctype>
#include <iterator>

#include "coli/base/text.h"

namespace coli {
namespace {
// No real machine has this many logical CPUs; a larger index is a corrupt list.
constexpr int kMaxCpuIndex = 1 << 16;
}  // namespace

CpuSet::CpuSet(std::vector<int> cpus) : cpus_(std::move(cpus)) {
  std::sort(cpus_.begin(), cpus_.end());
  cpus_.erase(std::unique(cpus_.begin(), cpus_.end()), cpus_.end());
}

Result<CpuSet> CpuSet::parse(std::string_view list) {
  std::vector<std::pair<int, int>> ranges;
  const std::string_view body = trim(list);
  if (body.empty()) return CpuSet{};
  for (std::string_view item : split(body, ',')) {
    item = trim(item);
    const auto dash = item.find('-');
    const auto first = parse_int(item.substr(0, dash));
    const auto last = dash == std::string_view::npos ? first : parse_int(item.substr(dash + 1));
    if (!first || !last || *first < 0 || *last < *first || *last > kMaxCpuIndex) {
      return make_error("invalid CPU list item '" + std::string(item) + "' in '" + std::string(body) +
                        "' (expected e.g. 0-3,8)");
    }
    ranges.emplace_back(static_cast<int>(*first), static_cast<int>(*last));
  }
  // Overlapping ranges are merged before they are expanded, so a list that
  // repeats "0-65536" still yields each CPU once, not 65537 per repetition.
  std::sort(ranges.begin(), ranges.end());
  std::vector<int> cpus;
  int next = 0;  // the first CPU not yet listed
  for (const auto& [first, last] : ranges) {
    for (int cpu = std::max(first, next); cpu <= last; ++cpu) cpus.push_back(cpu);
    next = std::max(next, last + 1);
  }
  return CpuSet(std::move(cpus));
}

Result<CpuSet> CpuSet::parse_hex_mask(std::string_view mask) {
  std::string digits;
  std::string_view body = trim(mask);
  if (starts_with(body, "0x") || starts_with(body, "0X")) body.remove_prefix(2);
  for (char c : body) {
    if (c == ',') continue;
    if (!std::isxdigit(static_cast<unsigned char>(c))) {
      return make_error("invalid CPU mask '" + std::string(mask) + "' (expected hex such as 0xff)");
    }
    digits.push_back(c);
  }
  if (digits.empty()) return make_error("empty CPU mask");
  std::vector<int> cpus;
  int bit = 0;
  for (auto it = digits.rbegin(); it != digits.rend(); ++it, bit += 4) {
    const int nibble = std::isdigit(static_cast<unsigned char>(*it)) ? *it - '0' : (std::tolower(*it) - 'a' + 10);
    for (int b = 0; b < 4; ++b) {
      if (nibble & (1 << b)) cpus.push_back(bit + b);
    }
  }
  if (!cpus.empty() && cpus.back() > kMaxCpuIndex) return make_error("CPU mask too large: " + std::string(mask));
  return CpuSet(std::move(cpus));
}

std::string CpuSet::to_list() const {
  std::string out;
  for (size_t i = 0; i < cpus_.size();) {
    size_t j = i;
    while (j + 1 < cpus_.size() && cpus_[j + 1] == cpus_[j] + 1) ++j;
    if (!out.empty()) out += ',';
    out += std::to_string(cpus_[i]);
    if (j > i) out += '-' + std::to_string(cpus_[j]);
    i = j + 1;
  }
  return out;
}

bool CpuSet::contains(int cpu) const { return std::binary_search(cpus_.begin(), cpus_.end(), cpu); }

CpuSet CpuSet::intersect(const CpuSet& other) const {
  std::vector<int> out;
  std::set_intersection(cpus_.begin(), cpus_.end(), other.cpus_.begin(), other.cpus_.end(), std::back_inserter(out));
  return CpuSet(std::move(out));
}

CpuSet CpuSet::unite(const CpuSet& other) const {
  std::vector<int> out;
  std::set_union(cpus_.begin(), cpus_.end(), other.cpus_.begin(), other.cpus_.end(), std::back_inserter(out));
  return CpuSet(std::move(out));
}

CpuSet CpuSet::minus(const CpuSet& other) const {
  std::vector<int> out;
  std::set_difference(cpus_.begin(), cpus_.end(), other.cpus_.begin(), other.cpus_.end(), std::back_inserter(out));
  return CpuSet(std::move(out));
}

}  // namespace coli
