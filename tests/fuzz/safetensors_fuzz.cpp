// libFuzzer target: safetensors::parse_header on arbitrary bytes must return a value or an
// error, never read outside the input, and every tensor it accepts lies inside the data.

#include "backends/qbruntime/safetensors.hpp"

#include <cstddef>
#include <cstdint>
#include <cstdlib>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::span<const std::byte> file(reinterpret_cast<const std::byte*>(data), size);
  auto tensors = kvlane::backends::safetensors::parse_header(file);
  if (!tensors)
    return 0;
  std::uint64_t header = 0;
  for (int i = 7; i >= 0; --i)
    header = (header << 8) | data[i];
  const std::uint64_t data_bytes = size - 8 - header;
  for (const auto& t : *tensors)
    if (t.begin > t.end || t.end > data_bytes)
      std::abort();
  return 0;
}
