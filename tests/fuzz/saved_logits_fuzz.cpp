// The base logits coli perplexity --save-logits writes (tools/saved_logits.cpp):
// a file whose header or size does not hold is refused, and every row an
// accepted one promises can be read.
#include <cstdlib>
#include <vector>

#include "fuzz_file.h"
#include "saved_logits.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const auto path = coli::fuzz::write_scratch_file("base.logits", data, size);
  (void)coli::tools::is_saved_logits(path);
  auto reader = coli::tools::SavedLogitsReader::open(path);
  if (!reader) return 0;
  std::vector<float> row(static_cast<std::size_t>(reader->header().vocab));
  for (std::uint64_t i = 0; i < reader->header().rows(); ++i) {
    if (!reader->next(row)) std::abort();  // the size check promised this row
  }
  return 0;
}
