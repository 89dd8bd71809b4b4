// What reads beside compute cost the compute (device_profile.h,
// ReadInterference). BackgroundReads keeps one read of a test file in
// flight through the engine's own I/O pool while started;
// measure_read_interference times the engine's expert decode batch on each
// thread set in alternating slices alone and beside those reads. The speed
// model slows a streaming plan's compute by the measured share while its
// reads are in flight (planner/README.md, "reads beside compute").
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "coli/base/result.h"
#include "coli/probe/device_profile.h"
#include "measure/kernel_tuning.h"
#include "measure/memory_bandwidth.h"  // ProgressFn

namespace coli::probe {

class BackgroundReads {
 public:
  // Writes a test file of `file_bytes` in `directory` (within
  // `write_seconds`, at least kMinTestFileBytes; unlinked at once, so it
  // never outlives the process), to be read in `block_bytes` reads at
  // random offsets, O_DIRECT where the filesystem allows it, by a pool of
  // `io_threads`. Errors name the directory and say what to do.
  static Result<std::unique_ptr<BackgroundReads>> open(const std::filesystem::path& directory, std::uint64_t file_bytes,
                                                       double write_seconds, std::uint64_t block_bytes, int io_threads);
  ~BackgroundReads();
  BackgroundReads(const BackgroundReads&) = delete;
  BackgroundReads& operator=(const BackgroundReads&) = delete;

  // Keeps one read in flight: each read, on landing, submits the next.
  void start();
  // Stops after the read in flight lands; an error when a read failed.
  Status stop();

  std::uint64_t block_bytes() const;
  int io_threads() const;
  bool direct() const;
  std::uint64_t reads_done() const;

 private:
  struct State;
  explicit BackgroundReads(std::unique_ptr<State> state);
  std::unique_ptr<State> state_;
};

// The probe's reads: 1 MiB (an expert record's order) from a 64 MiB test file.
inline constexpr std::uint64_t kInterferenceFileBytes = 64ull << 20, kInterferenceBlockBytes = 1ull << 20;

struct ReadInterferenceOptions {
  int pairs = 4;                // (alone, with reads) slice pairs per set, the order alternating
  double slice_seconds = 0.05;  // each slice's calls
  std::uint64_t pool_bytes = 0; // test weights; 0 = tuning_pool_bytes' default
  double fill_seconds = 2;      // first-touching them, at most (at least kSmallestPool)
};

// Options within `budget_seconds` of a probe for `sets` thread sets: a
// tenth of it over every slice (each 10-50 ms) and a twentieth (at most 2 s)
// for the test weights.
ReadInterferenceOptions read_interference_options(double budget_seconds, std::size_t sets);

// The expert decode batch (expert_q4_decode's call: one token on 8
// OLMoE-shaped int4 experts) on each of `sets`, pinned as the tuning phase
// pins them, alone and beside `reads`. A set that cannot be pinned is left
// out and the note says so; an error when a read fails or the kernel
// cannot be set up.
Result<ReadInterference> measure_read_interference(const CpuFacts& cpu, const MemoryFacts& memory,
                                                   const std::vector<ThreadCandidate>& sets, BackgroundReads& reads,
                                                   const ReadInterferenceOptions& options, const ProgressFn& progress);

// The same beside reads of `block_bytes` by `io_threads` from a
// kInterferenceFileBytes test file in `directory` (BackgroundReads::open),
// as coli-probe and --retime measure it.
Result<ReadInterference> measure_reads_beside_compute(const std::filesystem::path& directory, std::uint64_t block_bytes,
                                                      int io_threads, const CpuFacts& cpu, const MemoryFacts& memory,
                                                      const std::vector<ThreadCandidate>& sets,
                                                      const ReadInterferenceOptions& options, const ProgressFn& progress);

}  // namespace coli::probe
