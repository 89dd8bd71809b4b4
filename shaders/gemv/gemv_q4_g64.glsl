// q4_g64: nibbles [rows][cols/2] (low nibble = even column, value - 8), then
// binary16 scales [rows][cols/64]. cols is a multiple of 64, so a row is
// cols/8 whole words and each word (8 columns) lies inside one group.
// The includer defines X_AT(i): x[c] for column c = i + x_offset.

// Sum over columns [c0, c1) (multiples of 8) of row `row` of
// scale * value * x, the part this lane takes of the row's words.
float row_partial(uint row, uint c0, uint c1, uint lane, uint lanes, uint x_offset) {
  uint row_word = row * (pc.cols >> 3);
  uint row_group = row * (pc.cols >> 6);
  float acc = 0.0;
  for (uint j = (c0 >> 3) + lane; j < (c1 >> 3); j += lanes) {
    uint word = weights[row_word + j];
    uint group = row_group + (j >> 3);  // 8 words per group of 64
    vec2 pair = unpackHalf2x16(scales[group >> 1]);
    float scale = (group & 1u) == 0u ? pair.x : pair.y;
    uint i = (j << 3) - x_offset;
    float dot = 0.0;
    for (uint k = 0u; k < 8u; ++k) {
      dot += float(int((word >> (4u * k)) & 15u) - 8) * X_AT(i + k);
    }
    acc += scale * dot;
  }
  return acc;
}

// The row's full sum -> y[row] (scales were applied per group).
float row_finish(uint row, float total) {
  return total;
}
