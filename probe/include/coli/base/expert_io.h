// How the engine reads expert misses, shared by the engine (its default),
// the planner (the plan's default) and the probe (which times reads through
// a pool of that size, so the planner prices the engine's own read path).
#pragma once

namespace coli {

// I/O threads reading a layer's (or a prefill round's) missed experts, each
// a blocking pread, so this many reads are in flight at most.
inline constexpr int kDefaultIoThreads = 4;

}  // namespace coli
