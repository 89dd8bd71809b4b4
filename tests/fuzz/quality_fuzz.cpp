// The quality file coli perplexity --record writes and coli-plan --quality
// reads (planner/src/quality.cpp): parsed or refused by field, and what is
// accepted writes back to what parses again.
#include <cstdlib>

#include "coli/planner/quality.h"
#include "fuzz_file.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  auto table = coli::planner::parse_quality_json(coli::fuzz::as_text(data, size), "quality.json");
  if (table && !coli::planner::parse_quality_json(coli::planner::quality_to_json(*table), "again")) std::abort();
  return 0;
}
