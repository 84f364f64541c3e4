#pragma once

// kvlane::backends::safetensors — reads the host embedding table of a model from a
// .safetensors file (Hugging Face's format: an 8-byte little-endian header length, a JSON
// header naming each tensor's dtype, shape and byte range, then the data).
//
// Problem it solves: a Mobilint .mxq takes embeddings, not token ids, so the host looks up
// each token's row of `model.embed_tokens.weight` (bf16 in Mobilint's repositories, f16 or
// f32 elsewhere) and hands the NPU floats. The file is mapped read-only, never copied: a
// Llama-3.2-1B table is about 525 MB.
//
// parse_header() takes untrusted bytes and never reads outside them (it is fuzzed);
// embedding_table is immutable after open() and safe to read from any thread.

#include "common/expected.hpp"

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace kvlane::backends::safetensors {

struct tensor_info {
  std::string name;
  std::string dtype;                ///< as written: "BF16", "F16", "F32", "I64", ...
  std::vector<std::uint64_t> shape;
  std::uint64_t begin = 0;          ///< byte range in the data section
  std::uint64_t end = 0;
};

/// The tensors of a whole file image (header and data). Errors name what is wrong: a
/// header length beyond the file, malformed JSON, a missing or mistyped field, an unknown
/// dtype, a byte range outside the data or not matching dtype and shape.
expected<std::vector<tensor_info>, std::string> parse_header(std::span<const std::byte> file);

/// Element types a table can be read from.
enum class element_type : std::uint8_t { f32, f16, bf16 };

/// One 2-D [rows, hidden] tensor of a mapped file, converted to f32 row by row.
class embedding_table {
public:
  /// Maps `path` and picks `tensor` (by name; empty = the only 2-D float tensor whose
  /// second dimension is `hidden`, or of any width when `hidden` is 0).
  static expected<embedding_table, std::string> open(const std::string& path,
                                                     std::string_view tensor,
                                                     std::uint32_t hidden);

  embedding_table(embedding_table&& other) noexcept;
  embedding_table& operator=(embedding_table&& other) noexcept;
  embedding_table(const embedding_table&) = delete;
  embedding_table& operator=(const embedding_table&) = delete;
  ~embedding_table();

  std::uint32_t rows() const noexcept { return rows_; }
  std::uint32_t hidden() const noexcept { return hidden_; }
  element_type type() const noexcept { return type_; }
  const std::string& name() const noexcept { return name_; }

  /// Writes row `id` (< rows()) as floats into `out` (hidden() floats).
  void lookup(std::uint32_t id, std::span<float> out) const noexcept;

private:
  embedding_table() = default;
  void release() noexcept;

  void* map_ = nullptr;
  std::size_t map_size_ = 0;
  const std::byte* data_ = nullptr; ///< first byte of the tensor
  std::uint32_t rows_ = 0;
  std::uint32_t hidden_ = 0;
  element_type type_ = element_type::f32;
  std::string name_;
};

/// IEEE half and bfloat16 to float (exact; subnormals, infinities and NaN kept).
float half_to_float(std::uint16_t h) noexcept;
float bf16_to_float(std::uint16_t b) noexcept;

} // namespace kvlane::backends::safetensors
