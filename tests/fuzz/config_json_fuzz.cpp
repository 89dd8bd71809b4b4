// config.json (engine/model/src/config_fields.cpp, model_config.cpp,
// latent_config.cpp, rope_config.cpp). parse_model_config lays an accepted
// config out into its expected tensors (the whole-model bounds), as coli
// convert and coli-plan do next, so counts that would hang or exhaust memory
// there are caught here.
#include "coli/model/model_config.h"
#include "fuzz_file.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  (void)coli::model::parse_model_config(coli::fuzz::as_text(data, size), "config.json");
  return 0;
}
