#include "read_round_settle.h"

#include <cmath>
#include <cstdint>

namespace coli::bench {

bool rounds_settled(double previous_round_s, double round_s) {
  return previous_round_s > 0 && round_s > 0 && std::abs(round_s / previous_round_s - 1.0) <= kSettledShare;
}

double mean_round_seconds(const experts::ReadRounds& rounds) {
  std::uint64_t count = 0;
  double seconds = 0;
  for (std::size_t m = 1; m < rounds.rounds.size(); ++m) count += rounds.rounds[m], seconds += rounds.seconds[m];
  return count > 0 ? seconds / static_cast<double>(count) : 0.0;
}

}  // namespace coli::bench
