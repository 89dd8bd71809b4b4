#include "measure/parallel_overhead.h"

#include <omp.h>

#include <algorithm>
#include <chrono>

#include "measure/stats.h"

namespace coli::probe {
namespace {

using Clock = std::chrono::steady_clock;

template <class Body>
double raw_time_us(int repetitions, const Body& body) {
  std::vector<double> samples;
  samples.reserve(static_cast<std::size_t>(repetitions));
  for (int i = 0; i < repetitions; ++i) {
    const auto start = Clock::now();
    body();
    samples.push_back(std::chrono::duration<double, std::micro>(Clock::now() - start).count());
  }
  return summarize(std::move(samples)).median;
}

// Less what reading the clock twice costs (a VM's clock can take as long as the region).
template <class Body>
double time_us(int repetitions, const Body& body) {
  static const double clock_us = raw_time_us(10000, [] {});
  return std::max(0.0, raw_time_us(repetitions, body) - clock_us);
}

// What a region costs more when the calling thread has just written
// `floats` that every thread then reads, as a GEMV's threads read the hidden
// state the calling thread normed. The read is vectorised (omp simd), as the
// engine's kernels read: a scalar sum's chain of dependent adds would time
// the adds (2048 of them took 2.2 us on one H100-box core) and not the read.
double broadcast_read_us(int threads, int floats, int repetitions, double region_us) {
  volatile float sink = 0;
  std::vector<float> hidden(static_cast<std::size_t>(floats));
  float value = 1;
  const double with_read = time_us(repetitions, [&] {
    value += 1;
    for (float& h : hidden) h = value;
#pragma omp parallel num_threads(threads)
    {
      float sum = 0;
#pragma omp simd reduction(+ : sum)
      for (std::size_t i = 0; i < hidden.size(); ++i) sum += hidden[i];
      if (sum < 0) sink = sum;
    }
  });
  return std::max(0.0, with_read - region_us);
}

// A region's cost as a pass pays it: the mean over runs of kRegionBlock
// regions back to back, the median of such blocks. A single region's median
// leaves out the tail a pass's regions meet (the H100 box's 16 threads:
// mean / median 1.27 over 20,000 regions, p99 6x the median; the 2-core VM
// 1.02-1.04, docs/benchmarks.md, session 52), and a block's mean of a rare
// long preemption is left out by the median over blocks.
constexpr int kRegionBlock = 64;
template <class Body>
double region_mean_us(int repetitions, const Body& body) {
  const double per_block_us = time_us(std::max(10, repetitions / kRegionBlock), [&] {
    for (int i = 0; i < kRegionBlock; ++i) body();
  });
  return per_block_us / kRegionBlock;
}

ParallelOverheadPoint measure_one(int threads, int repetitions) {
  volatile float sink = 0;
  auto empty_region = [&] {
#pragma omp parallel num_threads(threads)
    { sink = sink + 0.0f; }
  };
  for (int i = 0; i < 200; ++i) empty_region();  // the team formed and spinning
  ParallelOverheadPoint point{threads, region_mean_us(repetitions, empty_region), 0, 0, 0};
  // The figures below are single regions' medians less a single region's: like against like.
  const double single_region_us = time_us(repetitions, empty_region);
  constexpr int kBarriers = 100;
  const double barriers = time_us(std::max(10, repetitions / 10), [&] {
#pragma omp parallel num_threads(threads)
    {
      for (int b = 0; b < kBarriers; ++b) {
#pragma omp barrier
      }
    }
  });
  point.barrier_us = std::max(0.0, (barriers - single_region_us) / kBarriers);
  point.broadcast_us = broadcast_read_us(threads, kBroadcastFloats, repetitions, single_region_us);
  point.broadcast_narrow_us = broadcast_read_us(threads, kBroadcastNarrowFloats, repetitions, single_region_us);
  return point;
}

}  // namespace

ParallelOverhead measure_parallel_overhead(const std::vector<int>& threads, int repetitions) {
  ParallelOverhead out;
  out.repetitions = std::max(10, repetitions);
  for (int t : threads) out.points.push_back(measure_one(std::max(1, t), out.repetitions));
  return out;
}

std::vector<int> parallel_overhead_team_sizes(int usable_cpus) {
  std::vector<int> sizes;
  for (int t = 1; t < usable_cpus; t *= 2) sizes.push_back(t);
  sizes.push_back(std::max(1, usable_cpus));
  return sizes;
}

}  // namespace coli::probe
