// The exit status of every coli program (documented in docs/cli.md), so a
// script can tell what happened without parsing messages.
#pragma once

namespace coli::cli {

inline constexpr int kExitOk = 0;       // done
inline constexpr int kExitError = 1;    // a file, the machine or the model failed: the message says which and what to do
inline constexpr int kExitUsage = 2;    // the command line is wrong (unknown option, bad value, missing argument)
inline constexpr int kExitRefused = 3;  // the planner refused: the model does not fit, or an override breaks a rule

}  // namespace coli::cli
