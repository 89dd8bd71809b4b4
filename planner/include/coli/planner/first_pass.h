// What a process's first prompt pays beyond a warm pass (issue 15): the
// buffers that grow with the prompt (its activations, a prefill round's,
// the routing trace reserved at the first pass, the KV rows it writes) are
// fresh pages then, each faulted in and zeroed by the kernel. coli run's one
// prompt is always its process's first; coli serve's later prompts and
// coli-sweep's timed runs reuse the pages and pay none of it. Pure.
#pragma once

#include <cstdint>
#include <string>

#include "coli/planner/footprint.h"
#include "coli/planner/plan.h"
#include "coli/probe/device_profile.h"

namespace coli::planner {

inline constexpr std::uint64_t kFreshPageBytes = 4096;

struct FirstPassCost {
  bool priced = false;            // false: the profile has no fresh-page figure (see `inputs`)
  std::uint64_t fresh_bytes = 0;  // the memory plan's prompt-sized lines for this prompt
  double seconds = 0;             // fresh pages x the profile's fresh_page_us
  std::string inputs;             // the formula with its numbers, or why it is not priced
  bool operator==(const FirstPassCost&) const = default;
};

// The first pass of a `prompt_tokens` prompt under `plan` (a CPU plan: a
// whole-decoder GPU plan allocates its buffers in VRAM at load, and its
// host side has no prompt-sized lines, so it costs 0).
FirstPassCost first_pass_cost(const DeviceProfile& profile, const ModelFootprint& footprint, const Plan& plan,
                              int prompt_tokens);

// `prompt_tokens` at `warm_tok_per_s`, slowed by the first pass's cost.
double first_pass_tok_per_s(double warm_tok_per_s, int prompt_tokens, const FirstPassCost& cost);

}  // namespace coli::planner
