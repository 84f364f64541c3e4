#pragma once

// kvlane::ipc::proto::wire — fixed-width field access for the codecs
// (ipc/control_codec.cpp, ipc/record_codec.cpp); not part of the protocol's API.
//
// Fields are read and written with std::memcpy at byte offsets the caller has
// already bounds-checked; the wire is little-endian, which these helpers rely on.

#include "common/expected.hpp"
#include "ipc/protocol.hpp"
#include "ipc/utf8.hpp"

#include <bit>
#include <cstring>
#include <limits>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>

namespace kvlane::ipc::proto::wire {

static_assert(std::endian::native == std::endian::little,
              "the wire format is little-endian and encoded with plain memcpy");
static_assert(std::numeric_limits<float>::is_iec559, "floats travel as IEEE-754 binary32");

template <class T>
T get(std::span<const std::byte> b, std::size_t at) {
  static_assert(std::is_trivially_copyable_v<T>);
  T v;
  std::memcpy(&v, b.data() + at, sizeof v);
  return v;
}

template <class T>
void put(std::span<std::byte> b, std::size_t at, T v) {
  static_assert(std::is_trivially_copyable_v<T>);
  std::memcpy(b.data() + at, &v, sizeof v);
}

inline void put_bytes(std::span<std::byte> b, std::size_t at, std::string_view s) {
  if (!s.empty()) // memcpy from an empty view's nullptr is undefined even for 0 bytes
    std::memcpy(b.data() + at, s.data(), s.size());
}

inline std::string get_bytes(std::span<const std::byte> b, std::size_t at, std::size_t n) {
  return std::string(reinterpret_cast<const char*>(b.data() + at), n);
}

inline bool all_zero(std::span<const std::byte> b, std::size_t from, std::size_t to) {
  for (std::size_t i = from; i < to; ++i)
    if (b[i] != std::byte{0})
      return false;
  return true;
}

inline std::string num(std::uint64_t v) {
  return std::to_string(v);
}

inline unexpected<protocol_error> bad(std::string msg, errc code = errc::bad_message) {
  return unexpected(protocol_error{code, std::move(msg)});
}

/// `s` cut to at most `max` bytes at a UTF-8 boundary.
inline std::string cut(std::string_view s, std::size_t max) {
  return std::string(s.substr(0, utf8_prefix(s, max)));
}

} // namespace kvlane::ipc::proto::wire
