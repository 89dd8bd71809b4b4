// tokenizer.json (engine/tokenizer/load_tokenizer_json.cpp); an accepted
// vocabulary encodes and decodes a short text.
#include "coli/tokenizer/tokenizer.h"
#include "fuzz_file.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const auto path = coli::fuzz::write_scratch_file("tokenizer.json", data, size);
  auto tokenizer = coli::Tokenizer::from_tokenizer_json(path);
  if (tokenizer) {
    const auto ids = tokenizer->encode("Hello world, <|endoftext|> 123 \xc3\xa9");
    (void)tokenizer->decode(ids);
  }
  return 0;
}
