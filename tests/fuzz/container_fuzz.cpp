// The model container's index (engine/container), through its public
// ContainerReader::open on a file. The trailer's checksum over the index is
// recomputed for every input, so mutations reach the index's JSON, its
// fields and every bound behind them instead of stopping at the checksum
// (a damaged checksum is the one path this skips; container_test covers it).
// Seed: corpus/container_fuzz/tiny.coli, written by make_container_seed.
#include <xxhash.h>

#include <cstring>
#include <vector>

#include "coli/container/container.h"
#include "fuzz_file.h"

namespace {

constexpr std::size_t kTrailerBytes = 32;  // index offset, index size, index checksum, "COLIEND\0"

void reseal_index_checksum(std::vector<std::uint8_t>& file) {
  if (file.size() < kTrailerBytes) return;
  const std::size_t trailer = file.size() - kTrailerBytes;
  std::uint64_t offset = 0, bytes = 0;
  std::memcpy(&offset, file.data() + trailer, 8);
  std::memcpy(&bytes, file.data() + trailer + 8, 8);
  if (offset > trailer || bytes > trailer - offset) return;  // the reader refuses these itself
  const std::uint64_t checksum = XXH3_64bits(file.data() + offset, bytes);
  std::memcpy(file.data() + trailer + 16, &checksum, 8);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  std::vector<std::uint8_t> file(data, data + size);
  reseal_index_checksum(file);
  const auto path = coli::fuzz::write_scratch_file("model.coli", file.data(), file.size());
  (void)coli::container::ContainerReader::open(path);
  return 0;
}
