// GGUF metadata and the tokenizer.ggml.* vocabulary
// (engine/tokenizer/gguf_metadata.cpp, load_gguf.cpp).
#include "coli/tokenizer/gguf_metadata.h"
#include "coli/tokenizer/tokenizer.h"
#include "fuzz_file.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const auto path = coli::fuzz::write_scratch_file("vocab.gguf", data, size);
  auto tokenizer = coli::Tokenizer::from_gguf(path);
  if (tokenizer) {
    const auto ids = tokenizer->encode("Hello world, 123 \xc3\xa9");
    (void)tokenizer->decode(ids);
  }
  return 0;
}
