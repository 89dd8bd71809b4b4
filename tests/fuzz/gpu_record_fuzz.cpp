// GPU record TOML (the [gpus] table read by parse_gpu_record).
#include "coli/probe/profile_io.h"
#include "fuzz_file.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  (void)coli::parse_gpu_record(coli::fuzz::as_text(data, size), "fuzz-gpus.toml");
  return 0;
}
