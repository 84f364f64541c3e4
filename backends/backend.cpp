#include "backends/backend.hpp"

#include <fmt/format.h>

#include <cmath>

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
tokenizer::apply_chat_template(std::span<const chat_message>, std::span<const chat_tool>, bool) const {
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

std::optional<backend_error> check_embedding_inputs(const backend_info& info,
                                                    std::span<const std::vector<token_id>> inputs) {
  const auto bad = [](std::string message) {
    return backend_error{backend_errc::invalid_argument, std::move(message)};
  };
  if (inputs.empty())
    return bad("no inputs to embed");
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    const auto& in = inputs[i];
    if (in.empty())
      return bad(fmt::format("input {} holds no tokens", i));
    if (in.size() > info.max_context)
      return bad(fmt::format("input {} holds {} tokens; model '{}' embeds at most {} (max_context)",
                             i, in.size(), info.model, info.max_context));
    for (const auto t : in)
      if (t >= info.vocab_size)
        return bad(fmt::format("input {}: token {} is outside the vocabulary of model '{}' (size {})",
                               i, t, info.model, info.vocab_size));
  }
  return std::nullopt;
}

bool l2_normalize(std::span<float> v) noexcept {
  double sum = 0;
  for (const float x : v)
    sum += double(x) * double(x);
  if (!(sum > 0) || !std::isfinite(sum))
    return false;
  const double scale = 1.0 / std::sqrt(sum);
  for (auto& x : v)
    x = static_cast<float>(x * scale);
  return true;
}

void backend::embed(embedding_job job) {
  const auto& i = info();
  job.done(unexpected(backend_error{
    backend_errc::invalid_argument,
    fmt::format("model '{}' (backend {}) cannot produce embeddings", i.model, i.kind)}));
}

} // namespace kvlane::backends
