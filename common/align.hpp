#pragma once

// kvlane size arithmetic: rounding to a unit and the OS page size, the unit of
// every mapping, commit and release.

#include <cstddef>
#include <cstdint>

#include <unistd.h>

namespace kvlane {

/// `n` rounded up to the next multiple of `unit` (unit > 0).
constexpr std::uint64_t round_up(std::uint64_t n, std::uint64_t unit) noexcept {
  return (n + unit - 1) / unit * unit;
}

/// The OS page size (sysconf(_SC_PAGESIZE)), read once.
inline std::size_t page_size() noexcept {
  static const std::size_t size = static_cast<std::size_t>(::sysconf(_SC_PAGESIZE));
  return size;
}

} // namespace kvlane
