// Plan TOML (planner/src/plan_read.cpp); an accepted plan is also printed as JSON.
#include "coli/planner/plan_io.h"
#include "fuzz_file.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  auto plan = coli::planner::parse_plan(coli::fuzz::as_text(data, size), "fuzz.plan");
  if (plan) (void)coli::planner::plan_to_json(*plan);
  return 0;
}
