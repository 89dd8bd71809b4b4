// coli-parallel-overhead: what one OpenMP parallel region, one barrier and one
// read of the calling thread's fresh 8 KiB by every thread cost at each team
// size: the probe's measurement (probe/measure/parallel_overhead.h, stored in
// the profile's [measurements.parallel_overhead]) on its own, for any team
// sizes. Decode runs ~7 regions per layer with serial steps between them
// (docs/benchmarks.md); the speed model prices them (planner/src/speed.cpp).
#include <CLI/CLI.hpp>

#include <algorithm>
#include <cstdio>
#include <thread>
#include <vector>

#include "coli/cli/command_line.h"
#include "measure/parallel_overhead.h"

int main(int argc, char** argv) {
  std::vector<int> threads;
  int reps = 2000;
  CLI::App app{"coli-parallel-overhead: the cost of an OpenMP region, a barrier and a broadcast read per team size"};
  app.add_option("--threads", threads, "Team sizes, comma-separated (default: 1, 2, 4, ... up to the hardware threads)")
      ->delimiter(',')->check(CLI::Range(1, 4096));
  app.add_option("--reps", reps, "Repetitions per figure (median)")->check(CLI::Range(10, 1000000))->capture_default_str();
  coli::cli::add_version_flag(app, "coli-parallel-overhead");
  if (const auto done = coli::cli::parse(app, argc, argv)) return *done;
  if (threads.empty()) {
    threads = coli::probe::parallel_overhead_team_sizes(static_cast<int>(std::max(1u, std::thread::hardware_concurrency())));
  }
  const coli::ParallelOverhead measured = coli::probe::measure_parallel_overhead(threads, reps);
  std::printf("%8s %14s %14s %22s %22s\n", "threads", "region us", "barrier us", "8 KiB broadcast us", "256 B broadcast us");
  for (const coli::ParallelOverheadPoint& p : measured.points) {
    std::printf("%8d %14.2f %14.2f %22.2f %22.2f\n", p.threads, p.region_us, p.barrier_us, p.broadcast_us, p.broadcast_narrow_us);
  }
  std::printf("region: fork and join of an empty parallel region, the team already formed; barrier: one\n"
              "'#pragma omp barrier' inside a region; broadcast: what a region costs more when the calling\n"
              "thread has just written 2048 (or 64) floats that every thread then reads. Medians of %d repetitions.\n",
              measured.repetitions);
  return 0;
}
