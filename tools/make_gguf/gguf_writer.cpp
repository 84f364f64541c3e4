#include "tools/make_gguf/gguf_writer.hpp"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <unistd.h>

namespace kvlane::tools::make_gguf {

namespace {

// Values converted and written per step: bounds the writer's buffers (4 MiB
// of F32 values plus their converted copy) whatever the tensor's size.
constexpr std::int64_t chunk_values = std::int64_t{1} << 20;

struct ggml_context_deleter {
  void operator()(ggml_context* ctx) const noexcept { ggml_free(ctx); }
};

std::string errno_text(int error) {
  return std::strerror(error);
}

std::string type_name(gguf_type type) {
  const char* name = gguf_type_name(type);
  return name != nullptr ? name : "type " + std::to_string(static_cast<int>(type));
}

expected<void, std::string> copy_scalar(gguf_context* dst, const gguf_context* src,
                                        std::int64_t id, const char* key) {
  switch (gguf_get_kv_type(src, id)) {
  case GGUF_TYPE_UINT8: gguf_set_val_u8(dst, key, gguf_get_val_u8(src, id)); break;
  case GGUF_TYPE_INT8: gguf_set_val_i8(dst, key, gguf_get_val_i8(src, id)); break;
  case GGUF_TYPE_UINT16: gguf_set_val_u16(dst, key, gguf_get_val_u16(src, id)); break;
  case GGUF_TYPE_INT16: gguf_set_val_i16(dst, key, gguf_get_val_i16(src, id)); break;
  case GGUF_TYPE_UINT32: gguf_set_val_u32(dst, key, gguf_get_val_u32(src, id)); break;
  case GGUF_TYPE_INT32: gguf_set_val_i32(dst, key, gguf_get_val_i32(src, id)); break;
  case GGUF_TYPE_FLOAT32: gguf_set_val_f32(dst, key, gguf_get_val_f32(src, id)); break;
  case GGUF_TYPE_BOOL: gguf_set_val_bool(dst, key, gguf_get_val_bool(src, id)); break;
  case GGUF_TYPE_STRING: gguf_set_val_str(dst, key, gguf_get_val_str(src, id)); break;
  case GGUF_TYPE_UINT64: gguf_set_val_u64(dst, key, gguf_get_val_u64(src, id)); break;
  case GGUF_TYPE_INT64: gguf_set_val_i64(dst, key, gguf_get_val_i64(src, id)); break;
  case GGUF_TYPE_FLOAT64: gguf_set_val_f64(dst, key, gguf_get_val_f64(src, id)); break;
  default:
    return unexpected("key " + std::string(key) + " has the unsupported value type "
                      + type_name(gguf_get_kv_type(src, id)));
  }
  return {};
}

expected<void, std::string> copy_array(gguf_context* dst, const gguf_context* src, std::int64_t id,
                                       const char* key) {
  const gguf_type element_type = gguf_get_arr_type(src, id);
  const std::size_t n = gguf_get_arr_n(src, id);
  switch (element_type) {
  case GGUF_TYPE_STRING: {
    std::vector<const char*> strings(n);
    for (std::size_t i = 0; i < n; ++i)
      strings[i] = gguf_get_arr_str(src, id, i);
    gguf_set_arr_str(dst, key, strings.data(), n);
    return {};
  }
  case GGUF_TYPE_UINT8:
  case GGUF_TYPE_INT8:
  case GGUF_TYPE_UINT16:
  case GGUF_TYPE_INT16:
  case GGUF_TYPE_UINT32:
  case GGUF_TYPE_INT32:
  case GGUF_TYPE_FLOAT32:
  case GGUF_TYPE_BOOL:
  case GGUF_TYPE_UINT64:
  case GGUF_TYPE_INT64:
  case GGUF_TYPE_FLOAT64:
    gguf_set_arr_data(dst, key, element_type, gguf_get_arr_data(src, id), n);
    return {};
  default:
    return unexpected("key " + std::string(key) + " is an array of the unsupported type "
                      + type_name(element_type));
  }
}

// The bytes to write for `rows` rows of `values` stored as `type`: `values`
// itself for F32, else `scratch` after conversion into it.
std::span<const std::uint8_t> convert_rows(ggml_type type, std::span<const float> values,
                                           std::int64_t rows, std::int64_t row_length,
                                           std::vector<std::uint8_t>& scratch) {
  const std::size_t bytes = static_cast<std::size_t>(rows) * ggml_row_size(type, row_length);
  switch (type) {
  case GGML_TYPE_F16:
    scratch.resize(bytes);
    ggml_fp32_to_fp16_row(values.data(), reinterpret_cast<ggml_fp16_t*>(scratch.data()),
                          static_cast<std::int64_t>(values.size()));
    return {scratch.data(), bytes};
  case GGML_TYPE_Q8_0:
    scratch.resize(bytes);
    ggml_quantize_chunk(type, values.data(), scratch.data(), 0, rows, row_length, nullptr);
    return {scratch.data(), bytes};
  default:
    return {reinterpret_cast<const std::uint8_t*>(values.data()), bytes};
  }
}

} // namespace

ggml_log_capture::ggml_log_capture() {
  ggml_log_get(&previous_callback_, &previous_user_data_);
  ggml_log_set(&ggml_log_capture::append, this);
}

ggml_log_capture::~ggml_log_capture() {
  ggml_log_set(previous_callback_, previous_user_data_);
}

void ggml_log_capture::append(ggml_log_level, const char* text, void* self) {
  if (text != nullptr)
    static_cast<ggml_log_capture*>(self)->text_ += text;
}

std::string ggml_log_capture::text() const {
  std::string folded;
  std::size_t start = 0;
  while (start < text_.size()) {
    auto end = text_.find('\n', start);
    if (end == std::string::npos)
      end = text_.size();
    if (end > start) {
      if (!folded.empty())
        folded += "; ";
      folded.append(text_, start, end - start);
    }
    start = end + 1;
  }
  return folded;
}

expected<gguf_ptr, std::string> read_gguf_metadata(const std::string& path) {
  std::FILE* probe = std::fopen(path.c_str(), "rb");
  if (probe == nullptr)
    return unexpected(path + ": " + errno_text(errno));
  std::fclose(probe);

  ggml_log_capture log;
  const gguf_init_params params{.no_alloc = true, .ctx = nullptr};
  gguf_ptr ctx(gguf_init_from_file(path.c_str(), params));
  if (!ctx) {
    const auto detail = log.text();
    return unexpected(path + ": not a readable GGUF file"
                      + (detail.empty() ? "" : " (" + detail + ")"));
  }
  return ctx;
}

bool is_writable_type(ggml_type type) noexcept {
  return type == GGML_TYPE_F32 || type == GGML_TYPE_F16 || type == GGML_TYPE_Q8_0;
}

gguf_writer::gguf_writer() : ctx_(gguf_init_empty()) {}

expected<std::size_t, std::string> gguf_writer::copy_keys(const gguf_context* src,
                                                          std::string_view prefix) {
  std::size_t copied = 0;
  const std::int64_t n_kv = gguf_get_n_kv(src);
  for (std::int64_t id = 0; id < n_kv; ++id) {
    const char* key = gguf_get_key(src, id);
    if (!std::string_view(key).starts_with(prefix))
      continue;
    auto copy = gguf_get_kv_type(src, id) == GGUF_TYPE_ARRAY
                    ? copy_array(ctx_.get(), src, id, key)
                    : copy_scalar(ctx_.get(), src, id, key);
    if (!copy)
      return unexpected(std::move(copy.error()));
    ++copied;
  }
  return copied;
}

expected<void, std::string> gguf_writer::add_tensor(const std::string& name, ggml_type type,
                                                    std::span<const std::int64_t> ne,
                                                    value_source source) {
  if (!is_writable_type(type))
    return unexpected("tensor " + name + ": the type " + ggml_type_name(type)
                      + " cannot be written (only f32, f16 and q8_0)");
  if (ne.empty() || ne.size() > GGML_MAX_DIMS)
    return unexpected("tensor " + name + ": " + std::to_string(ne.size())
                      + " dimensions (1 to " + std::to_string(GGML_MAX_DIMS) + " are possible)");
  if (std::any_of(ne.begin(), ne.end(), [](std::int64_t n) { return n < 1; }))
    return unexpected("tensor " + name + ": every dimension must be at least 1");
  if (ne[0] % ggml_blck_size(type) != 0)
    return unexpected("tensor " + name + ": its row length " + std::to_string(ne[0])
                      + " is not a multiple of " + std::to_string(ggml_blck_size(type))
                      + ", the block size of " + ggml_type_name(type));
  if (name.empty() || name.size() >= GGML_MAX_NAME)
    return unexpected("tensor name '" + name + "' must have 1 to "
                      + std::to_string(GGML_MAX_NAME - 1) + " characters");
  if (gguf_find_tensor(ctx_.get(), name.c_str()) >= 0)
    return unexpected("tensor " + name + " is declared twice");

  const ggml_init_params params{
      .mem_size = ggml_tensor_overhead(), .mem_buffer = nullptr, .no_alloc = true};
  std::unique_ptr<ggml_context, ggml_context_deleter> descriptors(ggml_init(params));
  if (!descriptors)
    return unexpected("tensor " + name + ": ggml_init failed");
  ggml_tensor* descriptor =
      ggml_new_tensor(descriptors.get(), type, static_cast<int>(ne.size()), ne.data());
  ggml_set_name(descriptor, name.c_str());
  gguf_add_tensor(ctx_.get(), descriptor);

  std::int64_t rows = 1;
  for (std::size_t d = 1; d < ne.size(); ++d)
    rows *= ne[d];
  value_count_ += static_cast<std::uint64_t>(ne[0] * rows);
  tensors_.push_back({type, ne[0], rows, std::move(source)});
  return {};
}

expected<std::uint64_t, std::string> gguf_writer::write(const std::string& path) {
  const std::string temporary = path + ".tmp";
  std::FILE* file = std::fopen(temporary.c_str(), "wb");
  if (file == nullptr)
    return unexpected(temporary + ": " + errno_text(errno));

  auto size = write_to(file, temporary);
  if (std::fclose(file) != 0 && size)
    size = unexpected(temporary + ": " + errno_text(errno));
  if (!size) {
    std::remove(temporary.c_str());
    return size;
  }
  if (std::rename(temporary.c_str(), path.c_str()) != 0) {
    const int error = errno;
    std::remove(temporary.c_str());
    return unexpected(path + ": " + errno_text(error));
  }
  return size;
}

expected<std::uint64_t, std::string> gguf_writer::write_to(std::FILE* file,
                                                           const std::string& path) {
  {
    ggml_log_capture log;
    if (!gguf_write_to_file_ptr(ctx_.get(), file, /*only_meta=*/true))
      return unexpected(path + ": writing the metadata failed (" + log.text() + ")");
  }
  const off_t data_start = ftello(file);
  if (data_start < 0)
    return unexpected(path + ": " + errno_text(errno));

  const std::uint64_t alignment = gguf_get_alignment(ctx_.get());
  const std::vector<std::uint8_t> zeros(alignment, 0);
  std::vector<float> values;
  std::vector<std::uint8_t> scratch;
  std::uint64_t written = 0;
  for (std::size_t i = 0; i < tensors_.size(); ++i) {
    auto& t = tensors_[i];
    if (written != gguf_get_tensor_offset(ctx_.get(), static_cast<std::int64_t>(i)))
      return unexpected(path + ": internal error: tensor "
                        + gguf_get_tensor_name(ctx_.get(), static_cast<std::int64_t>(i))
                        + " would not start at its recorded offset");
    const std::int64_t chunk_rows = std::max<std::int64_t>(1, chunk_values / t.row_length);
    for (std::int64_t row = 0; row < t.rows; row += chunk_rows) {
      const std::int64_t rows = std::min(chunk_rows, t.rows - row);
      values.resize(static_cast<std::size_t>(rows * t.row_length));
      t.source(values);
      const auto bytes = convert_rows(t.type, values, rows, t.row_length, scratch);
      if (std::fwrite(bytes.data(), 1, bytes.size(), file) != bytes.size())
        return unexpected(path + ": " + errno_text(errno));
      written += bytes.size();
    }
    const std::uint64_t padding = (alignment - written % alignment) % alignment;
    if (std::fwrite(zeros.data(), 1, padding, file) != padding)
      return unexpected(path + ": " + errno_text(errno));
    written += padding;
  }
  if (std::fflush(file) != 0 || fsync(fileno(file)) != 0)
    return unexpected(path + ": " + errno_text(errno));
  return static_cast<std::uint64_t>(data_start) + written;
}

} // namespace kvlane::tools::make_gguf
