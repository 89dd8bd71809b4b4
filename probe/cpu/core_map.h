// Which PUs make up each physical core of a kind, and one usable PU per core:
// the placement both the thread rule and the bandwidth measurement use, so the
// threads measured are the threads recommended.
#pragma once

#include <vector>

#include "coli/probe/device_profile.h"

namespace coli::probe {

// The kind's own core map (CpuKind::core_pus) when the topology gave one; for
// hand-written facts without it, pus/cores consecutive PUs per core (siblings
// taken as adjacent).
std::vector<CpuSet> cores_of(const CpuKind& kind);

// The lowest usable PU of every core of `kind` that has one, in core order.
std::vector<int> first_usable_pu_per_core(const CpuKind& kind, const CpuSet& usable);

}  // namespace coli::probe
