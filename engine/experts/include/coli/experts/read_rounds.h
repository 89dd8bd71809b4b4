// The engine's expert-read rounds (a decode layer's misses, a prefill
// round's) by how many records each read, and their seconds from submission
// to the last read landing: the disk as the engine meets it, on the model's
// own file in its own pattern. The engine counts them (ExpertStore), a usage
// history keeps the latest run's, and the planner prices a batch of m reads
// by them where they were measured (measured_rates.h, DiskReads).
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <vector>

namespace coli::experts {

struct ReadRounds {
  static constexpr std::size_t kLargest = 64;  // rounds of more reads are filed here
  std::uint64_t record_bytes = 0;  // what one read transfers (the record stride under O_DIRECT)
  int io_threads = 0;              // the pool that read them
  int compute_threads = 0;         // the compute team they ran beside; 0 = not recorded (a version-5 history)
  std::vector<std::uint64_t> rounds = std::vector<std::uint64_t>(kLargest + 1, 0);  // index: reads in the round
  std::vector<double> seconds = std::vector<double>(kLargest + 1, 0.0);             // summed over those rounds
  // Rounds whose compute thread was still waiting when their last read
  // landed, and the seconds summed from that landing to the thread running
  // again: its wake-up, which a round's own time leaves out (the 2-core VM:
  // 12 us beside 1 compute thread, 6 beside 2). Version 7 histories.
  std::uint64_t waited = 0;
  double wake_seconds = 0;

  void add(std::size_t reads, double elapsed) {
    const std::size_t m = std::min(reads, kLargest);
    ++rounds[m];
    seconds[m] += elapsed;
  }
  // Rounds of the same reads, pool and team: one replaces the other in a history.
  bool same_setting(const ReadRounds& other) const {
    return record_bytes == other.record_bytes && io_threads == other.io_threads && compute_threads == other.compute_threads;
  }
  void add_wake(double elapsed) {
    ++waited;
    wake_seconds += elapsed;
  }
  bool empty() const {
    return std::all_of(rounds.begin(), rounds.end(), [](std::uint64_t n) { return n == 0; });
  }
  ReadRounds& operator+=(const ReadRounds& other) {
    for (std::size_t m = 0; m <= kLargest; ++m) rounds[m] += other.rounds[m], seconds[m] += other.seconds[m];
    waited += other.waited, wake_seconds += other.wake_seconds;
    return *this;
  }
  // `after`'s rounds less `before`'s (a timed step's), with after's record size, pool and team.
  static ReadRounds between(const ReadRounds& before, const ReadRounds& after) {
    ReadRounds out = after;
    for (std::size_t m = 0; m <= kLargest; ++m) {
      out.rounds[m] -= before.rounds[m];
      out.seconds[m] -= before.seconds[m];
    }
    out.waited -= before.waited, out.wake_seconds -= before.wake_seconds;
    return out;
  }
};

}  // namespace coli::experts
