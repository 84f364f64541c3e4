#pragma once

// kvlane::backends::chat_format — built-in chat templates per model family.
//
// render_chat() turns chat messages into prompt tokens the way the model's
// template does. Stateless; safe from any thread.

#include "backends/backend.hpp"
#include "common/expected.hpp"

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace kvlane::backends {

enum class chat_format : std::uint8_t { chatml, llama3, exaone };
std::string_view to_string(chat_format) noexcept;
/// "chatml" | "llama3" | "exaone"
std::optional<chat_format> parse_chat_format(std::string_view name) noexcept;

struct chat_message {
  std::string role; ///< system | user | assistant
  std::string content;
};

/// Renders messages as the model's template does, with the assistant header
/// when add_generation_prompt. Errors: unknown role.
expected<std::vector<token_id>, backend_error>
render_chat(chat_format, const tokenizer&, std::span<const chat_message>, bool add_generation_prompt);

} // namespace kvlane::backends
