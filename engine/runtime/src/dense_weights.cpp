#include "dense_weights.h"

#include "reference/gemv_reference.h"

namespace coli::runtime {

Result<DenseWeights> DenseWeights::load(const container::ContainerReader& reader,
                                        const std::function<bool(const std::string&)>& wanted) {
  DenseWeights weights;
  for (const container::TensorEntry& entry : reader.index().tensors) {
    if (wanted && !wanted(entry.name)) continue;
    Tensor tensor;
    tensor.format = entry.dtype;  // the reader checked it is a known dtype of the right size
    tensor.shape = entry.shape;
    tensor.data.resize(entry.bytes);
    if (Status s = reader.read(entry.offset, tensor.data); !s) return s.error();
    weights.bytes_ += entry.bytes;
    weights.tensors_.emplace(entry.name, std::move(tensor));
  }
  return weights;
}

Result<forward::DenseMatrix> DenseWeights::matrix(const std::string& name) const {
  const auto found = tensors_.find(name);
  if (found == tensors_.end()) return make_error("the container has no tensor " + name);
  const Tensor& t = found->second;
  if (traits(t.format).quantized) {
    return make_error("tensor " + name + " is quantised; the engine needs it in float (convert with --dense source)");
  }
  const int rows = static_cast<int>(t.shape.at(0));
  const int cols = t.shape.size() > 1 ? static_cast<int>(t.shape[1]) : 1;
  return forward::DenseMatrix{t.format, rows, cols, t.data.data()};
}

Result<Linear> DenseWeights::linear(const std::string& name) const {
  const auto found = tensors_.find(name);
  if (found == tensors_.end()) return make_error("the container has no tensor " + name);
  const Tensor& t = found->second;
  Linear out;
  out.format = t.format;
  if (!traits(t.format).quantized) {
    auto dense = matrix(name);
    if (!dense) return dense.error();
    out.dense = *dense;
    return out;
  }
  const auto rows = t.shape.at(0), cols = t.shape.at(1);
  const std::byte* scales = t.data.data() + traits(t.format).scales_offset(rows, cols);
  if (t.format == WeightFormat::q4_g64) {
    out.q4 = {reinterpret_cast<const std::uint8_t*>(t.data.data()), reinterpret_cast<const std::uint16_t*>(scales),
              static_cast<int>(rows), static_cast<int>(cols)};
    return out;
  }
  out.q8 = {reinterpret_cast<const std::int8_t*>(t.data.data()), reinterpret_cast<const float*>(scales),
            static_cast<int>(rows), static_cast<int>(cols)};
  return out;
}

int Linear::rows() const {
  if (format == WeightFormat::q4_g64) return q4.rows;
  if (format == WeightFormat::q8_row) return q8.rows;
  return dense.rows;
}

void Linear::apply(std::span<const float> x, std::span<float> y, const kernels::cpu::GemvOptions& gemv, bool exact,
                   std::span<const float> bias) const {
  if (!traits(format).quantized) {
    forward::gemv_dense(dense, x, y, gemv.threads, bias);
    return;
  }
  const bool int4 = format == WeightFormat::q4_g64;
  if (int4 && exact) kernels::gemv_reference_q4(q4.nibbles, q4.scales, q4.rows, q4.cols, x, y);
  else if (int4) kernels::cpu::gemv(q4, x, y, gemv);
  else if (exact) kernels::gemv_reference_q8(q8.weights, q8.scales, q8.rows, q8.cols, x, y);
  else kernels::cpu::gemv(q8, x, y, gemv);
  for (std::size_t i = 0; i < bias.size(); ++i) y[i] += bias[i];
}

std::span<const std::byte> DenseWeights::bytes_of(const std::string& name) const {
  const auto found = tensors_.find(name);
  return found == tensors_.end() ? std::span<const std::byte>() : std::span<const std::byte>(found->second.data);
}

std::vector<float> DenseWeights::vector(const std::string& name) const {
  const auto found = tensors_.find(name);
  if (found == tensors_.end()) return {};
  const Tensor& t = found->second;
  if (traits(t.format).quantized) return {};  // norms and biases are never quantised
  std::uint64_t count = 1;
  for (std::uint64_t d : t.shape) count *= d;
  std::vector<float> out(count);
  forward::dense_row(forward::DenseMatrix{t.format, 1, static_cast<int>(count), t.data.data()}, 0, out);
  return out;
}

}  // namespace coli::runtime
