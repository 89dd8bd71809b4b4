// The model container's index (engine/container), through its public
// ContainerReader::open on a file. This harness only reads the container:
// the parser itself belongs to engine/container.
#include "coli/container/container.h"
#include "fuzz_file.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const auto path = coli::fuzz::write_scratch_file("model.coli", data, size);
  (void)coli::container::ContainerReader::open(path);
  return 0;
}
