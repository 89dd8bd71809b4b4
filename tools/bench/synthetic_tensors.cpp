#include "synthetic_tensors.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "reference/gemv_reference.h"

namespace coli::bench {
namespace {

std::uint64_t rotl(std::uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

std::uint64_t splitmix64(std::uint64_t& x) {
  std::uint64_t z = (x += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// Round to nearest even, as PyTorch does when it casts to bfloat16.
std::uint16_t float_to_bf16(float value) {
  std::uint32_t bits;
  std::memcpy(&bits, &value, 4);
  bits += 0x7FFF + ((bits >> 16) & 1);
  return static_cast<std::uint16_t>(bits >> 16);
}

void fill_normal_rows(FastRng& rng, std::span<float> out, float mean, float stddev) {
  for (float& v : out) v = rng.normal(mean, stddev);
}

}  // namespace

FastRng::FastRng(std::uint64_t seed) {
  for (std::uint64_t& s : state_) s = splitmix64(seed);
}

std::uint64_t FastRng::next() {  // xoshiro256**
  const std::uint64_t result = rotl(state_[1] * 5, 7) * 9;
  const std::uint64_t t = state_[1] << 17;
  state_[2] ^= state_[0];
  state_[3] ^= state_[1];
  state_[1] ^= state_[2];
  state_[0] ^= state_[3];
  state_[2] ^= t;
  state_[3] = rotl(state_[3], 45);
  return result;
}

float FastRng::normal(float mean, float stddev) {
  const std::uint64_t r = next();
  const auto sum = static_cast<float>((r & 0xFFFF) + ((r >> 16) & 0xFFFF) + ((r >> 32) & 0xFFFF) + (r >> 48));
  constexpr float kMean = 2.0f * 65535.0f;
  const float kStddev = 65536.0f / std::sqrt(3.0f);  // sqrt(4 * 65536^2 / 12)
  return mean + stddev * (sum - kMean) / kStddev;
}

float FastRng::uniform(float low, float high) {
  return low + (high - low) * static_cast<float>(next() >> 40) * (1.0f / 16777216.0f);
}

void FastRng::fill_bytes(std::span<std::byte> out) {
  std::size_t i = 0;
  for (; i + 8 <= out.size(); i += 8) {
    const std::uint64_t r = next();
    std::memcpy(out.data() + i, &r, 8);
  }
  if (i < out.size()) {
    const std::uint64_t r = next();
    std::memcpy(out.data() + i, &r, out.size() - i);
  }
}

std::vector<std::byte> random_tensor(FastRng& rng, WeightFormat dtype, std::uint64_t rows, std::uint64_t cols,
                                     float mean, float stddev) {
  constexpr std::uint64_t kBlockRows = 256;
  const WeightFormatTraits& format = traits(dtype);
  std::vector<std::byte> out(format.matrix_bytes(rows, cols));
  std::byte* scales = out.data() + format.scales_offset(rows, cols);
  std::vector<float> block;
  for (std::uint64_t r0 = 0; r0 < rows; r0 += kBlockRows) {
    const std::uint64_t n = std::min(kBlockRows, rows - r0);
    block.resize(n * cols);
    fill_normal_rows(rng, block, mean, stddev);
    std::byte* dst = out.data() + format.weight_bytes(r0, cols);
    std::byte* block_scales = scales + format.scale_bytes_of(r0, cols);
    switch (dtype) {
      case WeightFormat::q8_row: {
        // The reference quantiser: max|w|/127 per row, nearbyint (half to even).
        const auto q = kernels::quantize_q8_row(block, static_cast<int>(n), static_cast<int>(cols));
        std::memcpy(dst, q.weights.data(), q.weights.size());
        std::memcpy(block_scales, q.scales.data(), q.scales.size() * 4);
        break;
      }
      case WeightFormat::q4_g64: {
        const auto q = kernels::quantize_q4_g64(block, static_cast<int>(n), static_cast<int>(cols));
        std::memcpy(dst, q.nibbles.data(), q.nibbles.size());
        std::memcpy(block_scales, q.scales.data(), q.scales.size() * 2);
        break;
      }
      case WeightFormat::f32: std::memcpy(dst, block.data(), block.size() * 4); break;
      case WeightFormat::bf16:
      case WeightFormat::f16:
        for (std::size_t i = 0; i < block.size(); ++i) {
          const std::uint16_t half = dtype == WeightFormat::bf16 ? float_to_bf16(block[i]) : kernels::float_to_half(block[i]);
          std::memcpy(dst + i * 2, &half, 2);
        }
        break;
    }
  }
  return out;
}

void fill_expert_record(FastRng& rng, WeightFormat format, std::span<const container::ExpertPart> parts,
                        float stddev, std::span<std::byte> record) {
  // Uniform nibbles (values -8..7) have a standard deviation of ~4.61,
  // uniform int8 of ~73.9: scale so weights land near `stddev`.
  const bool q4 = format == WeightFormat::q4_g64;
  const float base_scale = stddev / (q4 ? 4.61f : 73.9f);
  for (const container::ExpertPart& part : parts) {
    rng.fill_bytes(record.subspan(part.weights_offset, part.weights_bytes));
    std::byte* scales = record.data() + part.scales_offset;
    if (q4) {
      for (std::uint64_t i = 0; i < part.scales_bytes / 2; ++i) {
        const std::uint16_t half = kernels::float_to_half(base_scale * rng.uniform(0.75f, 1.25f));
        std::memcpy(scales + i * 2, &half, 2);
      }
    } else {
      for (std::uint64_t i = 0; i < part.scales_bytes / 4; ++i) {
        const float scale = base_scale * rng.uniform(0.75f, 1.25f);
        std::memcpy(scales + i * 4, &scale, 4);
      }
    }
  }
}

}  // namespace coli::bench
