// Wall time for the engine's and the tools' own timers: seconds on the
// steady clock (never stepped by NTP or the user), one definition for all.
#pragma once

#include <chrono>

namespace coli {

inline double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace coli
