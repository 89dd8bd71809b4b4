// coli-probe's engine: gathers facts (quick) and measurements (full) into a
// DeviceProfile. Every source is replayable (design.md #2).
#pragma once

#include <filesystem>
#include <functional>
#include <optional>
#include <string_view>

#include "coli/base/files.h"
#include "coli/base/result.h"
#include "coli/probe/device_profile.h"

namespace coli {

struct ProbeOptions {
  bool quick = false;                                  // facts only, no measurements
  SystemRoot root;                                     // /proc and /sys (live: "/")
  std::optional<std::filesystem::path> hwloc_xml;      // replay a topology instead of the live one
  std::optional<std::filesystem::path> sysctl_file;    // replay macOS sysctl values (no hwloc then)
  std::optional<std::filesystem::path> gpu_record;     // replay recorded GPU facts (a [gpus] TOML file)
  std::optional<std::filesystem::path> replay_machine; // the recorded machine directory, when one was given
  std::filesystem::path disk_dir = ".";                // filesystem whose read bandwidth is measured
  bool disk_dir_given = false;                         // the user named disk_dir: failing to measure it is an error
  double budget_seconds = 25;                          // measurements' seconds (kernel tuning: tuning_budget_seconds)
  bool budget_given = false;                           // the user set it: an upper bound for all measurements
  std::uint64_t tuning_pool_bytes = 0;                 // kernel tuning's test weights; 0 = 2x the LLC (weight_pool.h)
  std::function<void(std::string_view)> progress;      // one line per step; may be empty
};

// A recorded machine (the layout of tests/fixtures/machines/<name>/, what
// `--replay-machine DIR` reads): topology.xml, sysctl.txt, root/ (/proc and
// /sys) and gpus.toml, each used when present. A replay reads nothing live:
// run_probe refuses one without a recorded CPU topology (topology.xml or
// sysctl.txt), and marks unknown what the recording lacks (ISA without
// root/proc/cpuinfo, affinity without root/proc/self/status, cgroups without
// root/proc/self/cgroup; memory falls back to the topology's NUMA total and is
// refused, naming root/proc/meminfo, when the topology records none).
void apply_replay_machine(const std::filesystem::path& dir, ProbeOptions& options);

// True when any replay source is set: such a profile describes a recorded
// machine, so measurements (which would time *this* machine) are skipped.
bool is_replay(const ProbeOptions& options);

Result<DeviceProfile> run_probe(const ProbeOptions& options);

// $XDG_CONFIG_HOME/coli/device-profile.toml, else ~/.config/coli/device-profile.toml.
std::filesystem::path default_profile_path();

}  // namespace coli
