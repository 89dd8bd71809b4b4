#include "coli/forward/ops.h"

#include "reference/gemv_reference.h"

#include <omp.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <numeric>
#include <stdexcept>
#include <string>

namespace coli::forward {
namespace {


// Dot product of one stored row with x, accumulated in double: the dense
// layers are a small share of MoE time and exactness keeps tests tight.
__attribute__((target_clones("avx512f", "avx2", "default")))
double dot_f32(const float* row, const float* x, int cols) {
  double s0 = 0, s1 = 0, s2 = 0, s3 = 0;
  int c = 0;
  for (; c + 4 <= cols; c += 4) {
    s0 += static_cast<double>(row[c]) * x[c];
    s1 += static_cast<double>(row[c + 1]) * x[c + 1];
    s2 += static_cast<double>(row[c + 2]) * x[c + 2];
    s3 += static_cast<double>(row[c + 3]) * x[c + 3];
  }
  for (; c < cols; ++c) s0 += static_cast<double>(row[c]) * x[c];
  return (s0 + s1) + (s2 + s3);
}

// bf16 rows: widened to f32 in 16 independent float sums (bf16 carries 8
// mantissa bits, so f32 accumulation loses nothing that matters); the clones
// let the compiler use the widest vectors the CPU has.
__attribute__((target_clones("avx512f", "avx2", "default")))
double dot_bf16(const std::uint16_t* row, const float* x, int cols) {
  float sums[16] = {};
  int c = 0;
  for (; c + 16 <= cols; c += 16) {
    for (int lane = 0; lane < 16; ++lane) {
      const std::uint32_t wide = static_cast<std::uint32_t>(row[c + lane]) << 16;
      float value;
      std::memcpy(&value, &wide, 4);
      sums[lane] += value * x[c + lane];
    }
  }
  double total = 0;
  for (float s : sums) total += s;
  for (; c < cols; ++c) total += static_cast<double>(bf16_to_float(row[c])) * x[c];
  return total;
}

double dot_row(const DenseMatrix& w, int r, const float* x) {
  const std::size_t base = static_cast<std::size_t>(r) * w.cols;
  switch (w.dtype) {
    case WeightFormat::f32:
      return dot_f32(static_cast<const float*>(w.data) + base, x, w.cols);
    case WeightFormat::bf16:
      return dot_bf16(static_cast<const std::uint16_t*>(w.data) + base, x, w.cols);
    case WeightFormat::f16: {
      const auto* row = static_cast<const std::uint16_t*>(w.data) + base;
      double sum = 0;
      for (int c = 0; c < w.cols; ++c) sum += static_cast<double>(kernels::half_to_float(row[c])) * x[c];
      return sum;
    }
    case WeightFormat::q8_row:
    case WeightFormat::q4_g64: break;  // refused by require_float
  }
  return 0;
}

// Tokens per pass over a stored row in gemv_dense_many: the row is read
// from memory once and from L1 for the others, and the tile's activations
// (8 x 8 KiB for 2048 f32 columns) stay in L2.
constexpr int kDenseTokenTile = 8;
// Floats in a 64-byte cache line: gemv_dense_many's row chunks are multiples of it.
constexpr int kLineFloats = 16;

// Quantised matrices belong to kernels::cpu; reaching here is a programming error.
void require_float(const DenseMatrix& w) {
  if (!traits(w.dtype).cpu_float_kernels) {
    throw std::invalid_argument("forward: a " + std::string(name_of(w.dtype)) + " matrix needs the int8 kernels, not gemv_dense");
  }
}

}  // namespace

float bf16_to_float(std::uint16_t bits) {
  const std::uint32_t wide = static_cast<std::uint32_t>(bits) << 16;
  float out;
  std::memcpy(&out, &wide, 4);
  return out;
}

void gemv_dense(const DenseMatrix& w, std::span<const float> x, std::span<float> y, int threads,
                std::span<const float> bias) {
  require_float(w);
#pragma omp parallel for num_threads(std::max(1, threads)) schedule(static)
  for (int r = 0; r < w.rows; ++r) {
    const double sum = dot_row(w, r, x.data());
    y[static_cast<std::size_t>(r)] = static_cast<float>(bias.empty() ? sum : sum + bias[static_cast<std::size_t>(r)]);
  }
}

void gemv_dense_many(std::span<const DenseProduct> products, std::span<const float> x, int count, int threads) {
  for (const DenseProduct& p : products) {
    require_float(p.w);
    if (x.size() != static_cast<std::size_t>(count) * static_cast<std::size_t>(p.w.cols) ||
        p.y.size() != static_cast<std::size_t>(count) * static_cast<std::size_t>(p.w.rows)) {
      throw std::invalid_argument("gemv_dense_many: x must hold count * cols floats and y count * rows");
    }
  }
  const DenseWorkShares shares = dense_work_shares(products, count, std::max(1, threads));
  // Each token's sum is dot_row's, so the bits are gemv_dense's. A tile of
  // tokens over all of the item's rows, then the next tile: a row is read
  // once per tile, from L1 for the tile's other tokens.
  auto run_item = [&](const DenseWorkItem& item) {
    const DenseProduct& p = products[item.product];
    const std::size_t cols = static_cast<std::size_t>(p.w.cols), rows = static_cast<std::size_t>(p.w.rows);
    for (int t0 = item.first_token; t0 < item.last_token; t0 += kDenseTokenTile) {
      const int t1 = std::min(item.last_token, t0 + kDenseTokenTile);
      for (int r = item.first_row; r < item.last_row; ++r) {
        for (int t = t0; t < t1; ++t) {
          const double sum = dot_row(p.w, r, x.data() + static_cast<std::size_t>(t) * cols);
          p.y[static_cast<std::size_t>(t) * rows + static_cast<std::size_t>(r)] =
              static_cast<float>(p.bias.empty() ? sum : sum + p.bias[static_cast<std::size_t>(r)]);
        }
      }
    }
  };
#pragma omp parallel num_threads(std::max(1, threads))
  {
    // A team smaller than asked runs the shares in contiguous groups.
    const std::size_t team = static_cast<std::size_t>(omp_get_num_threads());
    const std::size_t member = static_cast<std::size_t>(omp_get_thread_num());
    const std::size_t members = shares.members();
    for (std::size_t m = members * member / team; m < members * (member + 1) / team; ++m) {
      for (const DenseWorkItem& item : shares.share(m)) run_item(item);
    }
  }
}

namespace {

// The flattened rows [begin, end) of `products` (starts[p]: product p's
// first), cut where a product ends, over tokens [0, count).
void add_row_range(std::span<const DenseProduct> products, const std::vector<long long>& starts, long long begin,
                   long long end, int count, std::vector<DenseWorkItem>& out) {
  for (std::size_t p = 0; p < products.size() && begin < end; ++p) {
    const long long first = std::max(begin, starts[p]), last = std::min(end, starts[p] + products[p].w.rows);
    if (first < last) out.push_back({p, static_cast<int>(first - starts[p]), static_cast<int>(last - starts[p]), 0, count});
  }
}

}  // namespace

DenseWorkShares dense_work_shares(std::span<const DenseProduct> products, int count, int threads) {
  threads = std::max(1, threads);
  std::vector<long long> starts;
  long long total = 0;
  for (const DenseProduct& p : products) starts.push_back(total), total += p.w.rows;
  // Rows split evenly, each cut moved to the nearest whole cache line of
  // its product's output rows. Cuts inside a line gave 16 threads 4 floats
  // each of every token's 64-byte line of a 64-row projection, and the line
  // moved between 4 cores for each token: the demo model's o projection ran
  // slower at 16 threads than at 8 on the H200 machine, its 8-row router
  // 1.5x the prediction.
  auto cut = [&](long long flat) {
    for (std::size_t p = 0; p < products.size(); ++p) {
      const long long rows = products[p].w.rows, local = flat - starts[p];
      if (local < 0 || local >= rows) continue;
      return starts[p] + std::min(rows, (local + kLineFloats / 2) / kLineFloats * kLineFloats);
    }
    return flat;  // the end
  };
  DenseWorkShares shares;
  int working = 0;
  for (int m = 0; m < threads; ++m) {
    shares.first.push_back(shares.items.size());
    add_row_range(products, starts, cut(total * m / threads), cut(total * (m + 1) / threads), count, shares.items);
    working += shares.items.size() > shares.first.back() ? 1 : 0;
  }
  shares.first.push_back(shares.items.size());
  const int tiles = (count + kDenseTokenTile - 1) / kDenseTokenTile;
  if (working == threads || tiles <= 1) return shares;
  // Narrow matrices (fewer whole lines than threads): one line of rows per
  // chunk, each chunk's tokens split at tiles so that the whole team works.
  int lines = 0;
  for (const DenseProduct& p : products) lines += (p.w.rows + kLineFloats - 1) / kLineFloats;
  const int groups = std::clamp(threads / std::max(1, lines), 1, tiles);
  shares.items.clear();
  for (std::size_t p = 0; p < products.size(); ++p) {
    for (int first = 0; first < products[p].w.rows; first += kLineFloats) {
      for (int g = 0; g < groups; ++g) {
        const DenseWorkItem item{p, first, std::min(products[p].w.rows, first + kLineFloats),
                                 std::min(count, tiles * g / groups * kDenseTokenTile),
                                 std::min(count, tiles * (g + 1) / groups * kDenseTokenTile)};
        if (item.first_token < item.last_token) shares.items.push_back(item);
      }
    }
  }
  // Item i to member i T / n: member m's items start at the first i with i T / n >= m.
  const std::size_t n = shares.items.size(), members = static_cast<std::size_t>(threads);
  for (std::size_t m = 0; m <= members; ++m) shares.first[m] = (m * n + members - 1) / members;
  return shares;
}

void dense_row(const DenseMatrix& w, int row, std::span<float> out) {
  require_float(w);
  const std::size_t base = static_cast<std::size_t>(row) * w.cols;
  for (int c = 0; c < w.cols; ++c) {
    switch (w.dtype) {
      case WeightFormat::f32: out[c] = static_cast<const float*>(w.data)[base + c]; break;
      case WeightFormat::bf16: out[c] = bf16_to_float(static_cast<const std::uint16_t*>(w.data)[base + c]); break;
      case WeightFormat::f16: out[c] = kernels::half_to_float(static_cast<const std::uint16_t*>(w.data)[base + c]); break;
      case WeightFormat::q8_row:
      case WeightFormat::q4_g64: break;  // refused by require_float
    }
  }
}

void rms_norm(std::span<const float> x, std::span<const float> weight, float eps, std::span<float> out) {
  // Eight partial sums: one chain of 2048 dependent double adds took ~3 us,
  // four norms per layer, on the thread the others wait for in decode.
  constexpr std::size_t kChains = 8;
  double partial[kChains] = {};
  std::size_t i = 0;
  for (; i + kChains <= x.size(); i += kChains) {
    for (std::size_t j = 0; j < kChains; ++j) partial[j] += static_cast<double>(x[i + j]) * x[i + j];
  }
  for (; i < x.size(); ++i) partial[0] += static_cast<double>(x[i]) * x[i];
  double sum = 0;
  for (double p : partial) sum += p;
  const double scale = 1.0 / std::sqrt(sum / static_cast<double>(x.size()) + eps);
  for (std::size_t k = 0; k < x.size(); ++k) out[k] = static_cast<float>(x[k] * scale) * weight[k];
}

void rms_norm_groups(std::span<float> x, int groups, std::span<const float> weight, float eps) {
  const std::size_t size = x.size() / static_cast<std::size_t>(groups);
  for (int g = 0; g < groups; ++g) {
    auto slice = x.subspan(static_cast<std::size_t>(g) * size, size);
    rms_norm(slice, weight, eps, slice);
  }
}

namespace {
std::atomic<std::uint64_t> next_rope_id{0};
}  // namespace

Rope::Rope(int head_dim, double theta) : head_dim_(head_dim), id_(next_rope_id.fetch_add(1) + 1) {
  for (int i = 0; i < head_dim / 2; ++i) inv_freq_.push_back(1.0 / std::pow(theta, 2.0 * i / head_dim));
}

void Rope::apply(std::span<float> x, int heads, int position) const {
  const int half = head_dim_ / 2;
  // One cos/sin per frequency, shared by every head (they were once per head
  // and frequency: 18% of a 512-token prefill on 16 cores), and kept for the
  // next call at the same position (q and k of every layer: 2 x layers calls
  // per decode token); same values.
  thread_local std::vector<double> cosines, sines;
  thread_local std::uint64_t cached_rope = 0;
  thread_local int cached_position = -1;
  if (cached_rope == id_ && cached_position == position) return rotate(x, heads, cosines, sines);
  cached_rope = id_, cached_position = position;
  cosines.resize(static_cast<std::size_t>(half));
  sines.resize(static_cast<std::size_t>(half));
  for (int i = 0; i < half; ++i) {
    const double angle = position * inv_freq_[static_cast<std::size_t>(i)];
    cosines[static_cast<std::size_t>(i)] = std::cos(angle);
    sines[static_cast<std::size_t>(i)] = std::sin(angle);
  }
  rotate(x, heads, cosines, sines);
}

std::vector<float> Rope::cos_sin_table(int positions) const {
  const std::size_t half = inv_freq_.size();
  std::vector<float> table(static_cast<std::size_t>(std::max(positions, 0)) * half * 2);
  for (std::size_t i = 0; i < half; ++i) {
    for (int p = 0; p < positions; ++p) {
      const double angle = p * inv_freq_[i];
      table[(static_cast<std::size_t>(p) * half + i) * 2] = static_cast<float>(std::cos(angle));
      table[(static_cast<std::size_t>(p) * half + i) * 2 + 1] = static_cast<float>(std::sin(angle));
    }
  }
  return table;
}

void Rope::rotate(std::span<float> x, int heads, const std::vector<double>& cosines, const std::vector<double>& sines) const {
  const int half = head_dim_ / 2;
  for (int h = 0; h < heads; ++h) {
    float* head = x.data() + static_cast<std::size_t>(h) * head_dim_;
    for (int i = 0; i < half; ++i) {
      const double c = cosines[static_cast<std::size_t>(i)], s = sines[static_cast<std::size_t>(i)];
      const double a = head[i], b = head[i + half];
      head[i] = static_cast<float>(a * c - b * s);
      head[i + half] = static_cast<float>(b * c + a * s);
    }
  }
}

int greedy_token(std::span<const float> logits) {
  int best = -1;
  float best_value = 0;
  for (std::size_t i = 0; i < logits.size(); ++i) {
    const float v = logits[i];
    // v - v is 0 exactly for finite v (NaN for NaN and infinities): one compare, no branch on the class.
    if ((best < 0 || v > best_value) && v - v == 0.0f) best = static_cast<int>(i), best_value = v;
  }
  return best;
}

void softmax(std::span<float> x) {
  const float peak = *std::max_element(x.begin(), x.end());
  double sum = 0;
  for (float& v : x) {
    v = std::exp(v - peak);
    sum += v;
  }
  for (float& v : x) v = static_cast<float>(v / sum);
}

void add_scaled(float weight, std::span<const float> y, std::span<float> out) {
  for (std::size_t i = 0; i < out.size(); ++i) out[i] += weight * y[i];
}

Routing route(std::span<const float> router_logits, int top_k, RouterNorm norm) {
  // Softmax with the vectorised exp (libm's expf, one call per expert, and
  // a sorted index vector were most of a 128-expert token's routing, run
  // serially per token and layer); the buffer stays with the thread.
  thread_local std::vector<float> probabilities;
  probabilities.assign(router_logits.begin(), router_logits.end());
  const int n = static_cast<int>(probabilities.size()), k = std::clamp(top_k, 0, n);
  if (n > 0) exp_shifted(probabilities, *std::max_element(probabilities.begin(), probabilities.end()));
  double sum = 0;
  for (const float v : probabilities) sum += v;
  for (float& v : probabilities) v = static_cast<float>(v / sum);
  // Top-k by insertion, highest probability first; equal probabilities keep
  // the lower expert id (torch.topk's order on CPU): scanning ids upwards, a
  // later expert passes only a strictly smaller probability.
  thread_local std::vector<int> best;
  best.resize(static_cast<std::size_t>(k));
  const float* p = probabilities.data();
  int* top = best.data();
  int held = 0;
  for (int e = 0; e < n && k > 0; ++e) {
    if (held == k && !(p[e] > p[top[k - 1]])) continue;
    int at = held == k ? k - 1 : held++;  // the last place, or a new one
    for (; at > 0 && p[e] > p[top[at - 1]]; --at) top[at] = top[at - 1];
    top[at] = e;
  }
  Routing routing;
  routing.experts.assign(best.begin(), best.end());
  routing.weights.reserve(static_cast<std::size_t>(k));
  double chosen = 0;
  for (const int e : routing.experts) {
    routing.weights.push_back(p[e]);
    chosen += routing.weights.back();
  }
  if (norm == RouterNorm::softmax_topk_renorm) {
    for (float& w : routing.weights) w = static_cast<float>(w / chosen);
  }
  return routing;
}

void attention_by_position(std::span<const float> q, std::span<const float> k_cache, std::span<const float> v_cache,
                           int positions, int heads, int kv_heads, int head_dim, std::span<float> out, int threads) {
  const int group = heads / kv_heads;
  const double scale = 1.0 / std::sqrt(static_cast<double>(head_dim));
  const std::size_t kv_stride = static_cast<std::size_t>(kv_heads) * head_dim;
#pragma omp parallel for num_threads(std::max(1, threads)) schedule(static)
  for (int h = 0; h < heads; ++h) {
    std::vector<float> scores(static_cast<std::size_t>(positions));
    const float* qh = q.data() + static_cast<std::size_t>(h) * head_dim;
    const std::size_t kv_offset = static_cast<std::size_t>(h / group) * head_dim;
    for (int p = 0; p < positions; ++p) {
      const float* k = k_cache.data() + p * kv_stride + kv_offset;
      double dot = 0;
      for (int d = 0; d < head_dim; ++d) dot += static_cast<double>(qh[d]) * k[d];
      scores[static_cast<std::size_t>(p)] = static_cast<float>(dot * scale);
    }
    softmax(scores);
    float* oh = out.data() + static_cast<std::size_t>(h) * head_dim;
    for (int d = 0; d < head_dim; ++d) {
      double acc = 0;
      for (int p = 0; p < positions; ++p) acc += static_cast<double>(scores[static_cast<std::size_t>(p)]) * v_cache[p * kv_stride + kv_offset + d];
      oh[d] = static_cast<float>(acc);
    }
  }
}

}  // namespace coli::forward
