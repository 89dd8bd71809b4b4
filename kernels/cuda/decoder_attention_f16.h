// The tensor-core prefill attention (decoder_attention_f16.cu), behind
// decoder_batch.h's attention_rows(..., AttentionMath::f16_tensor).
#pragma once

#include "cuda/decoder_kernels.h"

namespace coli::kernels::cuda::decoder {

// Heads are padded to 64 or 128 dims in the tensor-core tiles.
inline constexpr int kMaxTensorHeadDim = 128;
bool attention_f16_fits(int head_dim);

// attention_rows() with Q (pre-scaled), K, V and the softmax weights in f16
// and f32 sums: each output within about 2^-9 of the largest |V| entry
// for scores of moderate size.
int attention_rows_f16(Stream stream, const Attention& a, int tokens);

}  // namespace coli::kernels::cuda::decoder
