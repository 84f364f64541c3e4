#pragma once

// Writing a GGUF file with ggml's own GGUF API without holding its tensor data
// in memory. The key/values and tensor infos live in a gguf_context; each
// tensor's values come from a caller-supplied source, a chunk of whole rows at
// a time, and are converted to the tensor's type (F32, F16 or Q8_0, the latter
// with ggml_quantize_chunk) just before they are written. The file is written
// to PATH.tmp and renamed to PATH only once it is complete, so an interrupted
// run never leaves a partial file at PATH.
//
// Also: reading a GGUF file's metadata (no tensor data), copying key/values
// between contexts, and capturing ggml's log output so that its messages can
// be folded into error values instead of being printed on their own.

#include "common/expected.hpp"

#include <ggml.h>
#include <gguf.h>

#include <cstdint>
#include <cstdio>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace kvlane::tools::make_gguf {

struct gguf_deleter {
  void operator()(gguf_context* ctx) const noexcept { gguf_free(ctx); }
};
using gguf_ptr = std::unique_ptr<gguf_context, gguf_deleter>;

/// While alive, collects everything ggml logs instead of letting it reach
/// stderr; the previous log callback is restored on destruction.
class ggml_log_capture {
public:
  ggml_log_capture();
  ~ggml_log_capture();
  ggml_log_capture(const ggml_log_capture&) = delete;
  ggml_log_capture& operator=(const ggml_log_capture&) = delete;

  /// The captured text on one line (newlines folded to "; "), empty if none.
  std::string text() const;

private:
  static void append(ggml_log_level level, const char* text, void* self);

  ggml_log_callback previous_callback_ = nullptr;
  void* previous_user_data_ = nullptr;
  std::string text_;
};

/// The key/values and tensor infos of the GGUF file at `path` (no tensor
/// data). The error names the path.
expected<gguf_ptr, std::string> read_gguf_metadata(const std::string& path);

/// Fills `values` with the next values of a tensor in row-major order. Each
/// call asks for a whole number of rows; successive calls continue where the
/// previous one stopped.
using value_source = std::function<void(std::span<float> values)>;

/// The tensor types the writer can convert F32 values to.
bool is_writable_type(ggml_type type) noexcept;

class gguf_writer {
public:
  gguf_writer();

  /// The context holding the key/values, for gguf_set_val_* and friends.
  gguf_context* metadata() noexcept { return ctx_.get(); }

  /// Copies every key/value of `src` whose key starts with `prefix` (scalars
  /// and arrays of any element type) and returns how many were copied.
  expected<std::size_t, std::string> copy_keys(const gguf_context* src, std::string_view prefix);

  /// Declares the next tensor of the file; ne[0] is the row length. The
  /// values come from `source` when the file is written.
  expected<void, std::string> add_tensor(const std::string& name, ggml_type type,
                                         std::span<const std::int64_t> ne, value_source source);

  /// The number of values over all tensors declared so far.
  std::uint64_t value_count() const noexcept { return value_count_; }

  /// Writes the file to `path`.tmp, renames it to `path` and returns its size
  /// in bytes. On failure the temporary file is removed and the error names
  /// the path concerned.
  expected<std::uint64_t, std::string> write(const std::string& path);

private:
  struct tensor {
    ggml_type type;
    std::int64_t row_length;
    std::int64_t rows;
    value_source source;
  };

  expected<std::uint64_t, std::string> write_to(std::FILE* file, const std::string& path);

  gguf_ptr ctx_;
  std::vector<tensor> tensors_;
  std::uint64_t value_count_ = 0;
};

} // namespace kvlane::tools::make_gguf
