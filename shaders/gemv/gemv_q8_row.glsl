// q8_row: int8 weights [rows][cols] row-major, one float scale per row.
// The includer defines X_AT(i): x[c] for column c = i + x_offset.

// Sum over columns [c0, c1) of row `row` of weight * x, the part this lane
// takes when `lanes` lanes stride over the row's words.
float row_partial(uint row, uint c0, uint c1, uint lane, uint lanes, uint x_offset) {
  uint row_byte = row * pc.cols;
  float acc = 0.0;
  if ((pc.cols & 3u) == 0u) {
    // Rows start on a word: 4 columns per word, no bounds checks. c0 is a
    // multiple of 64 (tile start), so c stays word-aligned.
    uint row_word = row_byte >> 2;
    for (uint c = c0 + 4u * lane; c < c1; c += 4u * lanes) {
      int word = int(weights[row_word + (c >> 2)]);
      uint i = c - x_offset;
      acc += float(bitfieldExtract(word, 0, 8)) * X_AT(i)
           + float(bitfieldExtract(word, 8, 8)) * X_AT(i + 1u)
           + float(bitfieldExtract(word, 16, 8)) * X_AT(i + 2u)
           + float(bitfieldExtract(word, 24, 8)) * X_AT(i + 3u);
    }
  } else {
    // Rows start mid-word: visit every word overlapping the row's bytes
    // [row_byte + c0, row_byte + c1) and keep only those bytes.
    uint begin = row_byte + c0;
    uint end = row_byte + c1;
    for (uint w = (begin >> 2) + lane; w <= ((end - 1u) >> 2); w += lanes) {
      int word = int(weights[w]);
      for (uint k = 0u; k < 4u; ++k) {
        uint byte_index = 4u * w + k;
        if (byte_index >= begin && byte_index < end) {
          acc += float(bitfieldExtract(word, int(8u * k), 8)) * X_AT(byte_index - row_byte - x_offset);
        }
      }
    }
  }
  return acc;
}

// The row's full sum -> y[row].
float row_finish(uint row, float total) {
  return total * uintBitsToFloat(scales[row]);
}
