// The model's dense tensors (everything but routed experts), read from the
// container into one WeightMemory block once (huge pages where granted: they
// are streamed every token) and looked up by their Hugging Face names.
#pragma once

#include <functional>
#include <map>
#include <span>
#include <string>
#include <vector>

#include "coli/backend/backend.h"
#include "coli/base/result.h"
#include "coli/base/weight_memory.h"
#include "coli/container/container.h"
#include "coli/forward/ops.h"

namespace coli::runtime {

// A projection's weights as the container holds them (a float matrix, or
// int8 / int4 with scales); the backend multiplies by it.
using Linear = backend::WeightView;

class DenseWeights {
 public:
  // Every dense tensor, or only those `wanted` accepts (the GPU decoder reads
  // the rest from the container straight into device memory).
  static Result<DenseWeights> load(const container::ContainerReader& reader,
                                   const std::function<bool(const std::string&)>& wanted = {});

  // A 2-D float matrix (rows = shape[0]); error names the tensor when absent
  // or quantised (lookups such as the embedding need floats).
  Result<forward::DenseMatrix> matrix(const std::string& name) const;
  // A 2-D projection in whatever form the container holds it.
  Result<Linear> linear(const std::string& name) const;
  // A 1-D tensor as float32 (norm weights, biases); empty when absent.
  std::vector<float> vector(const std::string& name) const;
  bool has(const std::string& name) const { return tensors_.count(name) != 0; }
  // The stored bytes of a tensor; empty when absent.
  std::span<const std::byte> bytes_of(const std::string& name) const;
  std::uint64_t bytes() const { return bytes_; }

 private:
  struct Tensor {
    WeightFormat format = WeightFormat::f32;
    std::vector<std::uint64_t> shape;
    std::span<const std::byte> data;  // in memory_
  };
  WeightMemory memory_;
  std::map<std::string, Tensor> tensors_;
  std::uint64_t bytes_ = 0;
};

}  // namespace coli::runtime
