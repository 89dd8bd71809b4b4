// The model's dense tensors (everything but routed experts), read from the
// container into memory once and looked up by their Hugging Face names.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "coli/backend/backend.h"
#include "coli/base/result.h"
#include "coli/container/container.h"
#include "coli/forward/ops.h"

namespace coli::runtime {

// A projection's weights as the container holds them (a float matrix, or
// int8 / int4 with scales); the backend multiplies by it.
using Linear = backend::WeightView;

class DenseWeights {
 public:
  static Result<DenseWeights> load(const container::ContainerReader& reader);

  // A 2-D float matrix (rows = shape[0]); error names the tensor when absent
  // or quantised (lookups such as the embedding need floats).
  Result<forward::DenseMatrix> matrix(const std::string& name) const;
  // A 2-D projection in whatever form the container holds it.
  Result<Linear> linear(const std::string& name) const;
  // A 1-D tensor as float32 (norm weights, biases); empty when absent.
  std::vector<float> vector(const std::string& name) const;
  bool has(const std::string& name) const { return tensors_.count(name) != 0; }
  std::uint64_t bytes() const { return bytes_; }

 private:
  struct Tensor {
    bool q8_row = false;
    bool q4_g64 = false;
    forward::Dtype dtype = forward::Dtype::f32;
    std::vector<std::uint64_t> shape;
    std::vector<std::byte> data;
  };
  std::map<std::string, Tensor> tensors_;
  std::uint64_t bytes_ = 0;
};

}  // namespace coli::runtime
