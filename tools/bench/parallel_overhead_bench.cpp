// coli-parallel-overhead: what one OpenMP parallel region, one barrier and one
// read of the calling thread's fresh 8 KiB by every thread cost at each team
// size. Decode runs ~7 regions per layer with serial steps between them
// (docs/benchmarks.md, op-level breakdown); these are the fixed per-token
// costs a speed model needs (issue 15) and what merging regions would save
// (issue 13). Medians over many repetitions, after a warm-up at that size.
#include <omp.h>

#include <CLI/CLI.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <thread>
#include <vector>

#include "coli/cli/command_line.h"

namespace {

using Clock = std::chrono::steady_clock;

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

// Median microseconds of `body` over `reps` calls, each timed alone.
template <class Body>
double raw_time_us(int reps, const Body& body) {
  std::vector<double> samples;
  samples.reserve(static_cast<std::size_t>(reps));
  for (int i = 0; i < reps; ++i) {
    const auto start = Clock::now();
    body();
    samples.push_back(std::chrono::duration<double, std::micro>(Clock::now() - start).count());
  }
  return median(std::move(samples));
}

// The same less what reading the clock twice costs (a VM's clock can take a
// microsecond, as much as the region being timed).
template <class Body>
double time_us(int reps, const Body& body) {
  static const double clock_us = raw_time_us(10000, [] {});
  return std::max(0.0, raw_time_us(reps, body) - clock_us);
}

struct Row {
  int threads;
  double region_us, barrier_us, broadcast_us;
};

Row measure(int threads, int reps) {
  volatile float sink = 0;
  auto empty_region = [&] {
#pragma omp parallel num_threads(threads)
    { sink = sink + 0.0f; }
  };
  for (int i = 0; i < 200; ++i) empty_region();  // the team formed and spinning, as between decode steps
  Row row{threads, time_us(reps, empty_region), 0, 0};
  // 100 barriers inside one region, per barrier.
  const double hundred = time_us(std::max(1, reps / 10), [&] {
#pragma omp parallel num_threads(threads)
    {
      for (int b = 0; b < 100; ++b) {
#pragma omp barrier
      }
    }
  });
  row.barrier_us = std::max(0.0, (hundred - row.region_us) / 100);
  // The calling thread writes 2048 floats (a hidden state), then every thread reads them all.
  std::vector<float> hidden(2048);
  float value = 1;
  const double with_read = time_us(reps, [&] {
    value += 1;
    for (float& h : hidden) h = value;
#pragma omp parallel num_threads(threads)
    {
      float sum = 0;
      for (float h : hidden) sum += h;
      if (sum < 0) sink = sum;
    }
  });
  row.broadcast_us = std::max(0.0, with_read - row.region_us);
  return row;
}

}  // namespace

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
    const int hardware = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
    for (int t = 1; t < hardware; t *= 2) threads.push_back(t);
    threads.push_back(hardware);
  }
  std::printf("%8s %14s %14s %22s\n", "threads", "region us", "barrier us", "8 KiB broadcast us");
  for (int t : threads) {
    const Row row = measure(t, reps);
    std::printf("%8d %14.2f %14.2f %22.2f\n", row.threads, row.region_us, row.barrier_us, row.broadcast_us);
  }
  std::printf("region: fork and join of an empty parallel region, the team already formed; barrier: one\n"
              "'#pragma omp barrier' inside a region; broadcast: what a region costs more when the calling\n"
              "thread has just written 2048 floats that every thread then reads. Medians of %d repetitions.\n", reps);
  return 0;
}
