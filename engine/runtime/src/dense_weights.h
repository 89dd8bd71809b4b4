// The model's dense tensors (everything but routed experts), read from the
// container into memory once and looked up by their Hugging Face names.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "coli/base/result.h"
#include "coli/container/container.h"
#include "coli/forward/ops.h"

namespace coli::runtime {

class DenseWeights {
 public:
  static Result<DenseWeights> load(const container::ContainerReader& reader);

  // A 2-D matrix (rows = shape[0]); error names the tensor when absent.
  Result<forward::DenseMatrix> matrix(const std::string& name) const;
  // A 1-D tensor as float32 (norm weights, biases); empty when absent.
  std::vector<float> vector(const std::string& name) const;
  bool has(const std::string& name) const { return tensors_.count(name) != 0; }
  std::uint64_t bytes() const { return bytes_; }

 private:
  struct Tensor {
    forward::Dtype dtype;
    std::vector<std::uint64_t> shape;
    std::vector<std::byte> data;
  };
  std::map<std::string, Tensor> tensors_;
  std::uint64_t bytes_ = 0;
};

}  // namespace coli::runtime
