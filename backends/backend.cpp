#include "backends/backend.hpp"

namespace kvlane::backends {

std::string_view to_string(backend_errc code) noexcept {
  switch (code) {
    case backend_errc::context_overflow: return "context_overflow";
    case backend_errc::out_of_memory: return "out_of_memory";
    case backend_errc::snapshot_mismatch: return "snapshot_mismatch";
    case backend_errc::device_timeout: return "device_timeout";
    case backend_errc::invalid_argument: return "invalid_argument";
    case backend_errc::device_failure: return "device_failure";
  }
  return "unknown";
}

std::string_view to_string(snapshot_extent e) noexcept {
  switch (e) {
    case snapshot_extent::full_slot: return "full_slot";
    case snapshot_extent::used_length: return "used_length";
  }
  return "unknown";
}

expected<std::vector<token_id>, backend_error>
tokenizer::apply_chat_template(std::span<const chat_message>, bool) const {
  return unexpected(backend_error{backend_errc::invalid_argument,
                                  "this model's tokenizer carries no Jinja chat template"});
}

std::size_t backend::snapshot_size(std::uint32_t cache_len) const noexcept {
  const auto& i = info();
  if (i.caps.extent == snapshot_extent::full_slot)
    return i.snapshot_bytes;
  if (cache_len == 0)
    return 0;
  return static_cast<std::size_t>(i.snapshot_header_bytes + std::uint64_t(cache_len) * i.bytes_per_token);
}

} // namespace kvlane::backends
