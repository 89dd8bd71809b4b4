// Device profile TOML (probe/profile/profile_read*.cpp): any bytes give a
// profile or an Error, never a crash, hang or exception.
#include "coli/probe/profile_io.h"
#include "fuzz_file.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  auto profile = coli::parse_profile(coli::fuzz::as_text(data, size), "fuzz.toml");
  if (profile) (void)coli::profile_to_toml(*profile);  // what was accepted can be written back
  return 0;
}
