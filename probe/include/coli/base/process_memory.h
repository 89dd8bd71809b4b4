// What this process holds in RAM right now.
#pragma once

#include <cstdint>

namespace coli {

// The process's resident set now (/proc/self/statm), 0 when unreadable. A plan
// counts the whole process, so a check of the live headroom made by the
// running process adds this back: it is part of the plan, not of the rest of
// the machine.
std::uint64_t process_resident_bytes();
// The largest resident set the process has had (getrusage's ru_maxrss).
std::uint64_t process_peak_resident_bytes();
// The process's minor page faults so far, every thread's (getrusage's
// ru_minflt): pages it touched for the first time, each a trip into the
// kernel (10.7 us a 4 KiB page on the 2-core VM of docs/benchmarks.md,
// session 55).
std::uint64_t process_minor_page_faults();

}  // namespace coli
