// Live re-validation of a shared profile (docs/fleet.md): the effective
// profile is this machine's live facts, plus the shared profile's tuned values
// only when the classes match. Memory never comes from the file.
#include <cmath>
#include <map>

#include "coli/base/text.h"
#include "coli/probe/fleet.h"

namespace coli::fleet {
namespace {

std::string bytes_text(std::uint64_t bytes) { return format_bytes(bytes) + " (" + std::to_string(bytes) + " B)"; }
std::string optional_bytes(const std::optional<std::uint64_t>& bytes) { return bytes ? bytes_text(*bytes) : "none"; }
std::string optional_cpus(const std::optional<double>& cpus) {
  if (!cpus) return "none";
  char text[32];
  std::snprintf(text, sizeof text, "%.2f CPUs", *cpus);
  return text;
}

void differ(std::vector<FieldDifference>& out, std::string field, const std::string& a, const std::string& b) {
  if (a != b) out.push_back(FieldDifference{std::move(field), a, b});
}

std::vector<FieldDifference> compare_classes(const DeviceProfile& shared, const DeviceProfile& live) {
  const std::string unknown = "unknown (no [identity]: written before schema 3)";
  const auto a = class_fields(shared, shared.identity.kernel_catalogue.empty() ? unknown
                                                                               : shared.identity.kernel_catalogue);
  const auto b = class_fields(live, live.identity.kernel_catalogue.empty() ? unknown : live.identity.kernel_catalogue);
  std::map<std::string, const ClassField*> theirs;
  for (const ClassField& f : b) theirs[f.field] = &f;
  std::vector<FieldDifference> out;
  for (const ClassField& f : a) {
    const auto it = theirs.find(f.field);
    if (it == theirs.end()) {
      out.push_back(FieldDifference{f.field, f.shown, "absent"});
      continue;
    }
    if (it->second->class_value != f.class_value) out.push_back(FieldDifference{f.field, f.shown, it->second->shown});
    theirs.erase(it);
  }
  for (const ClassField& f : b) {
    if (theirs.count(f.field)) out.push_back(FieldDifference{f.field, "absent", f.shown});
  }
  return out;
}

// Facts that are never trusted from a file: reported when they differ.
std::vector<FieldDifference> compare_live_facts(const DeviceProfile& shared, const DeviceProfile& live) {
  std::vector<FieldDifference> out;
  const MemoryFacts &m = shared.memory, &l = live.memory;
  differ(out, "memory.total_bytes", bytes_text(m.total_bytes), bytes_text(l.total_bytes));
  differ(out, "memory.headroom_bytes", bytes_text(m.headroom_bytes) + " from " + m.headroom_source,
         bytes_text(l.headroom_bytes) + " from " + l.headroom_source);
  differ(out, "memory.cgroup_limit_bytes", optional_bytes(m.cgroup_limit_bytes), optional_bytes(l.cgroup_limit_bytes));
  differ(out, "cpu.usable.pus", shared.cpu.usable.pus.to_list(), live.cpu.usable.pus.to_list());
  differ(out, "cpu.usable.quota_cpus", optional_cpus(shared.cpu.usable.quota_cpus),
         optional_cpus(live.cpu.usable.quota_cpus));
  const auto& sc = shared.gpus.cuda;
  const auto& lc = live.gpus.cuda;
  for (std::size_t i = 0; i < std::min(sc.size(), lc.size()); ++i) {
    differ(out, "gpus.cuda[" + std::to_string(i) + "].free_memory_bytes", bytes_text(sc[i].free_memory_bytes),
           bytes_text(lc[i].free_memory_bytes));
  }
  // Each shared GPU against the same GPU here: by UUID, or by index and
  // model when the file's UUIDs were dropped (coli profile export).
  const auto& sv = shared.gpus.vulkan;
  for (std::size_t i = 0; i < sv.size(); ++i) {
    const GpuIdentity id = vulkan_identity(shared.gpus, static_cast<int>(i));
    const std::string at = "gpus.vulkan[" + std::to_string(i) + "]";
    const std::optional<int> here = find_gpu(live.gpus, id);
    if (!here) {
      differ(out, at, id.describe(), "no such GPU here");
      continue;
    }
    const VulkanDevice& lv = live.gpus.vulkan[static_cast<std::size_t>(*here)];
    for (std::size_t h = 0; h < std::min(sv[i].heaps.size(), lv.heaps.size()); ++h) {
      differ(out, at + ".heaps[" + std::to_string(h) + "].budget_bytes", optional_bytes(sv[i].heaps[h].budget_bytes),
             optional_bytes(lv.heaps[h].budget_bytes));
    }
  }
  return out;
}

// The shared thread set fits here when its PUs are usable and its counts
// stay within this machine's usable CPUs and quota; else the reason.
std::string threads_misfit(const ThreadRecommendation& t, const CpuFacts& live) {
  const CpuSet outside = t.decode_pus.unite(t.prefill_pus).minus(live.usable.pus);
  if (!outside.empty()) return "its thread PUs " + outside.to_list() + " are not usable here (usable " +
                               live.usable.pus.to_list() + ")";
  int limit = live.usable.pus.size();
  if (live.usable.quota_cpus) limit = std::min(limit, std::max(1, static_cast<int>(std::floor(*live.usable.quota_cpus))));
  if (t.decode_threads > limit || t.prefill_threads > limit) {
    return "its " + std::to_string(std::max(t.decode_threads, t.prefill_threads)) +
           " threads exceed this machine's usable CPUs and quota (" + std::to_string(limit) + ")";
  }
  return {};
}

}  // namespace

Revalidation revalidate(const DeviceProfile& shared, const DeviceProfile& live) {
  Revalidation r;
  r.class_mismatches = compare_classes(shared, live);
  r.class_match = r.class_mismatches.empty() && !shared.identity.equivalence_class.empty() &&
                  shared.identity.equivalence_class == live.identity.equivalence_class;
  if (!r.class_match && r.class_mismatches.empty()) {
    r.class_mismatches.push_back(FieldDifference{"identity.equivalence_class", shared.identity.equivalence_class,
                                                 live.identity.equivalence_class});
  }
  r.live_differences = compare_live_facts(shared, live);
  // Live facts first, always: memory, cgroup limits, usable CPUs, GPUs.
  r.effective = live;
  if (!r.class_match) {
    r.notes.push_back("tuned values (measurements, thread recommendation) of the profile are not used: "
                      "planning from this machine's live facts and its own thread rule");
    return r;
  }
  r.effective.measurements = shared.measurements;
  r.effective.provenance.mode = shared.provenance.mode;
  r.effective.provenance.sources.push_back("tuned values from a shared profile of " +
                                           shared.identity.equivalence_class + " (" + shared.fingerprint + ")");
  r.tuned_values_used = true;
  if (const std::string misfit = threads_misfit(shared.threads, live.cpu); misfit.empty()) {
    r.effective.threads = shared.threads;
    r.tuned_threads_used = true;
  } else {
    r.notes.push_back("thread recommendation: " + misfit + "; this machine's own (" + live.threads.rule + ", " +
                      std::to_string(live.threads.decode_threads) + " threads) is used");
  }
  return r;
}

std::vector<std::string> Revalidation::report(const std::string& profile_name) const {
  std::vector<std::string> lines;
  if (class_match) {
    lines.push_back(profile_name + ": class " + effective.identity.equivalence_class +
                    " matches this machine: its measurements" +
                    (tuned_threads_used ? " and thread recommendation are" : " are") + " used");
  } else {
    lines.push_back(profile_name + " does not match this machine's class (" + effective.identity.equivalence_class +
                    "); mismatches:");
    for (const FieldDifference& d : class_mismatches) lines.push_back("  " + d.line());
  }
  for (const std::string& note : notes) lines.push_back("  " + note);
  if (!live_differences.empty()) {
    lines.push_back("  read live (never from the file), the live value is used:");
    for (const FieldDifference& d : live_differences) lines.push_back("    " + d.line());
  }
  if (!class_match || !tuned_threads_used) {
    lines.push_back("  to tune this machine itself, re-probe it: coli-probe (then coli profile export to share it)");
  }
  return lines;
}

}  // namespace coli::fleet
