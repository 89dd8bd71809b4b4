#include "dense_weights.h"

#include "reference/gemv_reference.h"

namespace coli::runtime {

Result<DenseWeights> DenseWeights::load(const container::ContainerReader& reader,
                                        const std::function<bool(const std::string&)>& wanted) {
  DenseWeights weights;
  for (const container::TensorEntry& entry : reader.index().tensors) {
    if (wanted && !wanted(entry.name)) continue;
    Tensor tensor;
    if (entry.dtype == "Q8_ROW") tensor.q8_row = true;
    else if (entry.dtype == "Q4_G64") tensor.q4_g64 = true;
    else if (entry.dtype == "F32") tensor.dtype = forward::Dtype::f32;
    else if (entry.dtype == "BF16") tensor.dtype = forward::Dtype::bf16;
    else if (entry.dtype == "F16") tensor.dtype = forward::Dtype::f16;
    else return make_error(reader.path().string() + ": tensor " + entry.name + " has dtype " + entry.dtype + ", which the engine cannot use");
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
  if (t.q8_row || t.q4_g64) {
    return make_error("tensor " + name + " is quantised; the engine needs it in float (convert with --dense source)");
  }
  const int rows = static_cast<int>(t.shape.at(0));
  const int cols = t.shape.size() > 1 ? static_cast<int>(t.shape[1]) : 1;
  return forward::DenseMatrix{t.dtype, rows, cols, t.data.data()};
}

Result<Linear> DenseWeights::linear(const std::string& name) const {
  const auto found = tensors_.find(name);
  if (found == tensors_.end()) return make_error("the container has no tensor " + name);
  const Tensor& t = found->second;
  Linear out;
  if (!t.q8_row && !t.q4_g64) {
    auto dense = matrix(name);
    if (!dense) return dense.error();
    out.dense = *dense;
    return out;
  }
  const auto rows = t.shape.at(0), cols = t.shape.at(1);
  out.quantized = true;
  if (t.q4_g64) {
    out.int4 = true;
    out.q4 = {reinterpret_cast<const std::uint8_t*>(t.data.data()),
              reinterpret_cast<const std::uint16_t*>(t.data.data() + container::q4_g64_scales_offset(rows, cols)),
              static_cast<int>(rows), static_cast<int>(cols)};
    return out;
  }
  out.q8 = {reinterpret_cast<const std::int8_t*>(t.data.data()),
            reinterpret_cast<const float*>(t.data.data() + container::q8_row_scales_offset(rows, cols)),
            static_cast<int>(rows), static_cast<int>(cols)};
  return out;
}

void Linear::apply(std::span<const float> x, std::span<float> y, const kernels::cpu::GemvOptions& gemv, bool exact,
                   std::span<const float> bias) const {
  if (!quantized) {
    forward::gemv_dense(dense, x, y, gemv.threads, bias);
    return;
  }
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
  std::uint64_t count = 1;
  for (std::uint64_t d : t.shape) count *= d;
  std::vector<float> out(count);
  forward::dense_row(forward::DenseMatrix{t.dtype, 1, static_cast<int>(count), t.data.data()}, 0, out);
  return out;
}

}  // namespace coli::runtime
