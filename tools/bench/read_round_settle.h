// When a recording of read rounds has settled (sweep_run.cpp's
// rounds_of_next_pass): pure functions of the rounds, apart from the engine.
#pragma once

#include "coli/experts/read_rounds.h"

namespace coli::bench {

// A disk's reads speed up over the first passes of a file a virtual disk's
// host has not cached (the H200 box's demo model at cap 4, its file just
// written: the recording's rounds 0.24 ms, the grid's prompts 1.9k, 8.4k,
// 10.8k tok/s repeat by repeat and their rounds 0.08-0.11 ms): passes are
// recorded until a pass's mean round is within kSettledShare of the one
// before it, the passes before that left out, and until enough generated
// tokens waited to price resuming (ReadRounds::prices_resume); at most
// kMaxRoundPasses passes or kMaxRoundSeconds, then the rounds from the last
// pass that moved on.
inline constexpr double kSettledShare = 0.15, kMaxRoundSeconds = 20;
inline constexpr int kMaxRoundPasses = 12;
bool rounds_settled(double previous_round_s, double round_s);
// Every round's seconds over the rounds (0 without rounds).
double mean_round_seconds(const experts::ReadRounds& rounds);

}  // namespace coli::bench
