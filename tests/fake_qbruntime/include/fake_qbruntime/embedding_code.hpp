#pragma once

// How the stand-in qbruntime recognises tokens in its input: row `id` of the test
// embedding table holds id's eight base-16 digits in columns 0..7, a check value in
// column 8 and negative filler after it. Every value is exact in bf16, f16 and f32, so
// a correct lookup decodes back to the id, and a wrong row, stride or conversion does not
// decode (or decodes to another id, which changes the output).

#include <cstdint>
#include <optional>

namespace fake_qbr {

inline constexpr std::uint32_t code_columns = 9; ///< hidden size must be at least this

inline float embedding_value(std::uint32_t id, std::uint32_t column) {
  if (column < 8)
    return static_cast<float>((id >> (4 * column)) & 0xFu);
  std::uint32_t sum = 0;
  for (std::uint32_t c = 0; c < 8; ++c)
    sum += (id >> (4 * c)) & 0xFu;
  if (column == 8)
    return static_cast<float>(16 + sum % 16);
  return -0.25f * static_cast<float>(1 + (id + column) % 8);
}

inline std::optional<std::uint32_t> decode_embedding(const float* row, std::uint32_t hidden) {
  if (hidden < code_columns)
    return std::nullopt;
  std::uint32_t id = 0;
  for (std::uint32_t c = 0; c < 8; ++c) {
    const float v = row[c];
    if (!(v >= 0.0f && v <= 15.0f) || v != static_cast<float>(static_cast<std::uint32_t>(v)))
      return std::nullopt;
    id |= static_cast<std::uint32_t>(v) << (4 * c);
  }
  for (std::uint32_t c = 8; c < hidden; ++c)
    if (row[c] != embedding_value(id, c))
      return std::nullopt;
  return id;
}

} // namespace fake_qbr
