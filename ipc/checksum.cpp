#include "ipc/checksum.hpp"

#include <xxhash.h>

namespace kvlane::ipc {

std::uint64_t checksum64(std::span<const std::byte> data, std::uint64_t seed) noexcept {
  return XXH3_64bits_withSeed(data.data(), data.size(), seed);
}

} // namespace kvlane::ipc
