// A whole .safetensors file: length prefix, JSON header, offsets against the
// file size (engine/model/src/safetensors_header.cpp).
#include "coli/model/safetensors.h"
#include "fuzz_file.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const auto path = coli::fuzz::write_scratch_file("model.safetensors", data, size);
  auto file = coli::model::read_safetensors_header(path);
  if (file)
    for (const auto& tensor : file->tensors) (void)tensor.element_count();
  return 0;
}
