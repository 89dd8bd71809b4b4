// model.safetensors.index.json beside one valid shard, so an index that names
// it reaches the shard header and the index/shard cross-checks
// (engine/model/src/safetensors_set.cpp).
#include <string>

#include "coli/model/safetensors.h"
#include "fuzz_file.h"

namespace {

// model-00001-of-00001.safetensors: "a" (F32 [2]) and "b" (BF16 [1, 2]).
void write_shard_once() {
  static const bool written = [] {
    const std::string header = R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                               R"("b":{"dtype":"BF16","shape":[1,2],"data_offsets":[8,12]}})";
    std::string file(8, '\0');
    for (int i = 0; i < 8; ++i) file[static_cast<std::size_t>(i)] = static_cast<char>((header.size() >> (8 * i)) & 0xff);
    file += header + std::string(12, '\0');
    coli::fuzz::write_scratch_file("model-00001-of-00001.safetensors",
                                   reinterpret_cast<const std::uint8_t*>(file.data()), file.size());
    return true;
  }();
  (void)written;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  write_shard_once();
  const auto path = coli::fuzz::write_scratch_file("model.safetensors.index.json", data, size);
  (void)coli::model::open_safetensors_index(path);
  return 0;
}
