#include "backends/qbruntime/safetensors.hpp"

#include <nlohmann/json.hpp>

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <bit>
#include <cerrno>
#include <cstring>
#include <limits>
#include <utility>

namespace kvlane::backends::safetensors {

static_assert(std::endian::native == std::endian::little,
              "safetensors data is little-endian; lookup() copies it as is");

namespace {

/// The header is JSON of a few hundred bytes per tensor; 100 MB is the format's own limit.
constexpr std::uint64_t max_header_bytes = 100'000'000;

std::uint64_t element_size(std::string_view dtype) noexcept {
  struct entry {
    std::string_view name;
    std::uint64_t size;
  };
  constexpr entry sizes[] = {{"F64", 8}, {"F32", 4}, {"F16", 2}, {"BF16", 2}, {"I64", 8},
                             {"U64", 8}, {"I32", 4}, {"U32", 4}, {"I16", 2}, {"U16", 2},
                             {"I8", 1},  {"U8", 1},  {"BOOL", 1}, {"F8_E4M3", 1}, {"F8_E5M2", 1}};
  for (const auto& e : sizes)
    if (e.name == dtype)
      return e.size;
  return 0;
}

std::string error_in(std::string_view name, std::string_view what) {
  return "safetensors: tensor \"" + std::string(name) + "\": " + std::string(what);
}

bool read_u64(const nlohmann::json& j, std::uint64_t& out) {
  if (!j.is_number_unsigned())
    return false;
  out = j.get<std::uint64_t>();
  return true;
}

} // namespace

float half_to_float(std::uint16_t h) noexcept {
  const std::uint32_t sign = (h & 0x8000u) << 16;
  const std::uint32_t exp = (h >> 10) & 0x1Fu;
  std::uint32_t mant = h & 0x3FFu;
  std::uint32_t bits = 0;
  if (exp == 0x1F) {
    bits = sign | 0x7F800000u | (mant << 13);
  } else if (exp != 0) {
    bits = sign | ((exp + 112) << 23) | (mant << 13);
  } else if (mant == 0) {
    bits = sign;
  } else {
    // Subnormal: normalise.
    std::uint32_t e = 113;
    while ((mant & 0x400u) == 0) {
      mant <<= 1;
      --e;
    }
    bits = sign | (e << 23) | ((mant & 0x3FFu) << 13);
  }
  return std::bit_cast<float>(bits);
}

float bf16_to_float(std::uint16_t b) noexcept {
  return std::bit_cast<float>(static_cast<std::uint32_t>(b) << 16);
}

expected<std::vector<tensor_info>, std::string> parse_header(std::span<const std::byte> file) {
  if (file.size() < 8)
    return unexpected(std::string("safetensors: file of ") + std::to_string(file.size())
                      + " bytes is shorter than the 8-byte header length");
  std::uint64_t header_len = 0;
  for (int i = 7; i >= 0; --i)
    header_len = (header_len << 8) | std::to_integer<std::uint64_t>(file[static_cast<std::size_t>(i)]);
  if (header_len > max_header_bytes || header_len > file.size() - 8)
    return unexpected("safetensors: header length " + std::to_string(header_len)
                      + " exceeds the file (" + std::to_string(file.size() - 8)
                      + " bytes after the length)");
  const auto* text = reinterpret_cast<const char*>(file.data() + 8);
  const auto header = nlohmann::json::parse(text, text + header_len, nullptr, false);
  if (header.is_discarded())
    return unexpected(std::string("safetensors: the header is not valid JSON"));
  if (!header.is_object())
    return unexpected(std::string("safetensors: the header is not a JSON object"));
  const std::uint64_t data_size = file.size() - 8 - header_len;

  std::vector<tensor_info> out;
  for (const auto& [name, t] : header.items()) {
    if (name == "__metadata__")
      continue;
    if (!t.is_object())
      return unexpected(error_in(name, "not an object"));
    tensor_info info;
    info.name = name;
    const auto dtype = t.find("dtype");
    if (dtype == t.end() || !dtype->is_string())
      return unexpected(error_in(name, "missing string \"dtype\""));
    info.dtype = dtype->get<std::string>();
    const std::uint64_t elem = element_size(info.dtype);
    if (elem == 0)
      return unexpected(error_in(name, "unknown dtype \"" + info.dtype + "\""));
    const auto shape = t.find("shape");
    if (shape == t.end() || !shape->is_array())
      return unexpected(error_in(name, "missing array \"shape\""));
    std::uint64_t count = 1;
    for (const auto& d : *shape) {
      std::uint64_t v = 0;
      if (!read_u64(d, v))
        return unexpected(error_in(name, "shape holds a value that is not a non-negative integer"));
      if (v != 0 && count > std::numeric_limits<std::uint64_t>::max() / elem / v)
        return unexpected(error_in(name, "shape overflows"));
      count *= v;
      info.shape.push_back(v);
    }
    const auto offsets = t.find("data_offsets");
    if (offsets == t.end() || !offsets->is_array() || offsets->size() != 2
        || !read_u64((*offsets)[0], info.begin) || !read_u64((*offsets)[1], info.end))
      return unexpected(error_in(name, "missing \"data_offsets\" [begin, end]"));
    if (info.begin > info.end || info.end > data_size)
      return unexpected(error_in(name, "data_offsets [" + std::to_string(info.begin) + ", "
                                           + std::to_string(info.end) + "] outside the "
                                           + std::to_string(data_size) + " data bytes"));
    if (info.end - info.begin != count * elem)
      return unexpected(error_in(name, "holds " + std::to_string(info.end - info.begin)
                                           + " bytes, its dtype and shape need "
                                           + std::to_string(count * elem)));
    out.push_back(std::move(info));
  }
  return out;
}

embedding_table::embedding_table(embedding_table&& other) noexcept
  : map_(std::exchange(other.map_, nullptr)), map_size_(std::exchange(other.map_size_, 0)),
    data_(other.data_), rows_(other.rows_), hidden_(other.hidden_), type_(other.type_),
    name_(std::move(other.name_)) {}

embedding_table& embedding_table::operator=(embedding_table&& other) noexcept {
  if (this != &other) {
    release();
    map_ = std::exchange(other.map_, nullptr);
    map_size_ = std::exchange(other.map_size_, 0);
    data_ = other.data_;
    rows_ = other.rows_;
    hidden_ = other.hidden_;
    type_ = other.type_;
    name_ = std::move(other.name_);
  }
  return *this;
}

embedding_table::~embedding_table() {
  release();
}

void embedding_table::release() noexcept {
  if (map_ != nullptr)
    ::munmap(map_, map_size_);
  map_ = nullptr;
}

expected<embedding_table, std::string> embedding_table::open(const std::string& path,
                                                             std::string_view tensor,
                                                             std::uint32_t hidden) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    return unexpected(path + ": " + std::strerror(errno));
  struct stat st{};
  if (::fstat(fd, &st) != 0 || st.st_size <= 0) {
    const int e = errno;
    ::close(fd);
    return unexpected(path + ": " + (st.st_size <= 0 ? "empty file" : std::strerror(e)));
  }
  const auto size = static_cast<std::size_t>(st.st_size);
  void* map = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
  ::close(fd);
  if (map == MAP_FAILED)
    return unexpected(path + ": cannot map: " + std::strerror(errno));
  embedding_table table;
  table.map_ = map;
  table.map_size_ = size;
  const std::span<const std::byte> file(static_cast<const std::byte*>(map), size);

  auto tensors = parse_header(file);
  if (!tensors)
    return unexpected(path + ": " + tensors.error());
  auto is_float = [](const tensor_info& t) {
    return t.dtype == "F32" || t.dtype == "F16" || t.dtype == "BF16";
  };
  const tensor_info* chosen = nullptr;
  if (!tensor.empty()) {
    for (const auto& t : *tensors)
      if (t.name == tensor)
        chosen = &t;
    if (chosen == nullptr)
      return unexpected(path + ": no tensor named \"" + std::string(tensor) + "\"");
  } else {
    std::string candidates;
    for (const auto& t : *tensors) {
      if (t.shape.size() == 2 && is_float(t) && (hidden == 0 || t.shape[1] == hidden)) {
        candidates += (candidates.empty() ? "\"" : ", \"") + t.name + "\"";
        chosen = chosen == nullptr ? &t : nullptr;
        if (chosen == nullptr)
          break;
      }
    }
    if (chosen == nullptr)
      return unexpected(path + ": "
                        + (candidates.empty()
                             ? "no 2-D float tensor of width " + std::to_string(hidden)
                             : "several 2-D tensors of width " + std::to_string(hidden) + " ("
                                 + candidates + ", ...)")
                        + "; set embedding_tensor");
  }
  if (chosen->shape.size() != 2 || !is_float(*chosen))
    return unexpected(path + ": tensor \"" + chosen->name + "\" is " + chosen->dtype + " of rank "
                      + std::to_string(chosen->shape.size())
                      + "; an embedding table is a 2-D F32, F16 or BF16 tensor");
  if (hidden != 0 && chosen->shape[1] != hidden)
    return unexpected(path + ": tensor \"" + chosen->name + "\" has rows of "
                      + std::to_string(chosen->shape[1]) + " values, the model takes "
                      + std::to_string(hidden));
  if (chosen->shape[0] == 0 || chosen->shape[0] > std::numeric_limits<std::uint32_t>::max()
      || chosen->shape[1] == 0 || chosen->shape[1] > std::numeric_limits<std::uint32_t>::max())
    return unexpected(path + ": tensor \"" + chosen->name + "\" has an unusable shape");

  std::uint64_t header_len = 0;
  for (int i = 7; i >= 0; --i)
    header_len = (header_len << 8) | std::to_integer<std::uint64_t>(file[static_cast<std::size_t>(i)]);
  table.data_ = file.data() + 8 + header_len + chosen->begin;
  table.rows_ = static_cast<std::uint32_t>(chosen->shape[0]);
  table.hidden_ = static_cast<std::uint32_t>(chosen->shape[1]);
  table.type_ = chosen->dtype == "F32"   ? element_type::f32
                : chosen->dtype == "F16" ? element_type::f16
                                         : element_type::bf16;
  table.name_ = chosen->name;
  return table;
}

void embedding_table::lookup(std::uint32_t id, std::span<float> out) const noexcept {
  const std::size_t n = hidden_;
  switch (type_) {
    case element_type::f32:
      std::memcpy(out.data(), data_ + std::size_t{id} * n * 4, n * 4);
      return;
    case element_type::f16:
    case element_type::bf16: {
      const std::byte* row = data_ + std::size_t{id} * n * 2;
      for (std::size_t i = 0; i < n; ++i) {
        std::uint16_t v = 0;
        std::memcpy(&v, row + 2 * i, 2); // little-endian file on a little-endian host
        out[i] = type_ == element_type::f16 ? half_to_float(v) : bf16_to_float(v);
      }
      return;
    }
  }
}

} // namespace kvlane::backends::safetensors
