// How far ahead of the rows they are reading the engine's streaming loops
// (the CPU GEMV kernels over weights, attention over the KV cache) issue
// software prefetches. Hardware prefetchers stop at 4 KiB pages and ramp up
// slowly on the short per-thread blocks of a decode step; without it one
// thread's compute and memory time add up instead of overlapping (16-core
// Xeon, 1 thread, q4 GEMV: 7.6 -> 11.8 GB/s). Of 0, 1, 2 and 4 KiB, 4 KiB was
// best; 8 and 16 KiB were within that machine's run-to-run noise.
// COLI_PREFETCH_BYTES overrides it (read once; 0 turns prefetching off) to
// measure other distances.
#pragma once

#include <cstddef>

namespace coli {

inline constexpr std::size_t kDefaultStreamPrefetchBytes = 4096;

// COLI_PREFETCH_BYTES as given when it is a plain number up to 1 MiB, else
// the default (the kernels must run whatever the environment says).
std::size_t stream_prefetch_bytes_from(const char* value);

// The distance for this process: COLI_PREFETCH_BYTES, read once.
std::size_t stream_prefetch_bytes();

}  // namespace coli
