// Writes the container harness's seed (corpus/container_fuzz/tiny.coli) with
// the project's own ContainerWriter, so the seed always has the current format
// and valid checksums: one f32 tensor and one layer of two f32 experts.
//   build-fuzz/tests/fuzz/make_container_seed tests/fuzz/corpus/container_fuzz/tiny.coli
#include <cstdio>
#include <vector>

#include "coli/container/container.h"

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s OUT.coli\n", argv[0]);
    return 2;
  }
  using coli::container::ExpertPart;
  auto writer = coli::container::ContainerWriter::create(argv[1]);
  if (!writer) return std::fprintf(stderr, "%s\n", writer.error().message.c_str()), 1;
  const std::vector<float> norm = {1.0f, 0.5f, -0.25f, 2.0f};
  auto ok = writer->add_tensor("model.norm.weight", coli::WeightFormat::f32, {4}, std::as_bytes(std::span(norm)));
  std::vector<ExpertPart> parts;
  for (std::uint64_t i = 0; i < 3; ++i) parts.push_back({i == 0 ? "gate" : i == 1 ? "up" : "down", 2, 2, i * 16, 16, i * 16 + 16, 0});
  if (ok) ok = writer->begin_experts(coli::WeightFormat::f32, 1, 2, {0}, parts);
  const std::vector<float> record(12, 0.125f);
  for (int expert = 0; ok && expert < 2; ++expert) ok = writer->add_expert(std::as_bytes(std::span(record)));
  if (ok) ok = writer->finish("qwen3_moe", R"({"model_type": "qwen3_moe"})", "fuzz seed");
  if (!ok) return std::fprintf(stderr, "%s\n", ok.error().message.c_str()), 1;
  return 0;
}
