// The dot product of one weight row with x, for every weight format coli
// stores (coli/base/weight_format.h; byte layouts in
// kernels/reference/gemv_reference.h and engine/container): the includer
// declares the specialization constant FORMAT. Lanes split the row's words;
// the caller adds the lanes' partial sums.
//   0 f32: float words            1 bf16: two per word (low = even column)
//   2 f16: two per word           3 q8_row: int8 x4 per word, float scale per row
//   4 q4_g64: nibbles x8 per word, binary16 scale per 64 columns
#define FORMAT_F32 0u
#define FORMAT_BF16 1u
#define FORMAT_F16 2u
#define FORMAT_Q8_ROW 3u
#define FORMAT_Q4_G64 4u

// Words of one row (cols is a multiple of the format's columns per word).
uint row_words(uint cols) {
  if (FORMAT == FORMAT_F32) return cols;
  if (FORMAT == FORMAT_BF16 || FORMAT == FORMAT_F16) return cols >> 1;
  if (FORMAT == FORMAT_Q8_ROW) return cols >> 2;
  return cols >> 3;
}

// Partial sums of row `row` for TOKENS activation vectors (vector t at
// xs.v[base[t] + column]), over the words lane, lane + lanes, ...: each
// weight word is read once for all of them. Scales are applied per group
// (q4_g64); q8_row's per-row scale comes in row_scale. The includer
// declares TOKENS.
void row_partial(Words w, Words s, uint row, uint cols, InFloats xs, uint base[TOKENS], uint lane, uint lanes,
                 inout float acc[TOKENS]) {
  uint words = row_words(cols);
  uint first = row * words;
  for (uint j = lane; j < words; j += lanes) {
    uint word = w.v[first + j];
    if (FORMAT == FORMAT_F32) {
      float a = uintBitsToFloat(word);
      for (uint t = 0u; t < TOKENS; ++t) acc[t] += a * xs.v[base[t] + j];
    } else if (FORMAT == FORMAT_BF16 || FORMAT == FORMAT_F16) {
      vec2 pair = FORMAT == FORMAT_BF16 ? vec2(uintBitsToFloat(word << 16), uintBitsToFloat(word & 0xffff0000u))
                                        : unpackHalf2x16(word);
      for (uint t = 0u; t < TOKENS; ++t) {
        uint c = base[t] + 2u * j;
        acc[t] += pair.x * xs.v[c] + pair.y * xs.v[c + 1u];
      }
    } else if (FORMAT == FORMAT_Q8_ROW) {
      int sword = int(word);
      vec4 q = vec4(bitfieldExtract(sword, 0, 8), bitfieldExtract(sword, 8, 8), bitfieldExtract(sword, 16, 8),
                    bitfieldExtract(sword, 24, 8));
      for (uint t = 0u; t < TOKENS; ++t) {
        uint c = base[t] + 4u * j;
        acc[t] += q.x * xs.v[c] + q.y * xs.v[c + 1u] + q.z * xs.v[c + 2u] + q.w * xs.v[c + 3u];
      }
    } else {
      uint group = row * (cols >> 6) + (j >> 3);
      vec2 pair = unpackHalf2x16(s.v[group >> 1]);
      float scale = (group & 1u) == 0u ? pair.x : pair.y;
      float q[8];
      for (uint k = 0u; k < 8u; ++k) q[k] = float(int((word >> (4u * k)) & 15u) - 8);
      for (uint t = 0u; t < TOKENS; ++t) {
        uint c = base[t] + 8u * j;
        float dot = 0.0;
        for (uint k = 0u; k < 8u; ++k) dot += q[k] * xs.v[c + k];
        acc[t] += scale * dot;
      }
    }
  }
}

// The row's full sum -> its value (q8_row's per-row scale).
float row_scale(Words s, uint row, float total) {
  if (FORMAT == FORMAT_Q8_ROW) return total * uintBitsToFloat(s.v[row]);
  return total;
}
