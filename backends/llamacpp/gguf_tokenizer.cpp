#include "backends/llamacpp/gguf_tokenizer.hpp"

#include <llama.h>

#include <algorithm>
#include <climits>

namespace kvlane::backends {

gguf_tokenizer::gguf_tokenizer(const llama_vocab* vocab, std::string chat_template)
    : vocab_(vocab), size_(static_cast<std::uint32_t>(llama_vocab_n_tokens(vocab))),
      chat_template_(std::move(chat_template)) {
  if (llama_vocab_get_add_bos(vocab_) && llama_vocab_bos(vocab_) != LLAMA_TOKEN_NULL)
    bos_ = static_cast<token_id>(llama_vocab_bos(vocab_));
  for (std::uint32_t id = 0; id < size_; ++id) {
    const auto t = static_cast<llama_token>(id);
    if (llama_vocab_is_eog(vocab_, t))
      stop_.push_back(id);
    const auto attr = llama_vocab_get_attr(vocab_, t);
    if ((attr & (LLAMA_TOKEN_ATTR_CONTROL | LLAMA_TOKEN_ATTR_USER_DEFINED)) != 0) {
      const char* text = llama_vocab_get_text(vocab_, t);
      if (text != nullptr && *text != '\0')
        specials_.emplace(text, id);
    }
  }
  special_texts_.assign(specials_.begin(), specials_.end());
  std::sort(special_texts_.begin(), special_texts_.end(),
            [](const auto& a, const auto& b) { return a.first.size() > b.first.size(); });
  if (!chat_template_.empty()) {
    auto text_of = [&](llama_token t) -> std::string {
      if (t == LLAMA_TOKEN_NULL)
        return {};
      const char* s = llama_vocab_get_text(vocab_, t);
      return s != nullptr ? s : "";
    };
    auto parsed = jinja_template::parse(chat_template_, text_of(llama_vocab_bos(vocab_)),
                                        text_of(llama_vocab_eos(vocab_)));
    if (parsed)
      jinja_ = std::move(*parsed);
    else
      jinja_error_ = parsed.error().message;
  }
}

expected<std::vector<token_id>, backend_error>
gguf_tokenizer::apply_chat_template(std::span<const chat_message> messages,
                                    std::span<const chat_tool> tools,
                                    bool add_generation_prompt) const {
  if (!jinja_)
    return unexpected(backend_error{backend_errc::invalid_argument,
                                    chat_template_.empty() ? "the GGUF carries no chat template"
                                                           : jinja_error_});
  auto parts = jinja_->render(messages, tools, add_generation_prompt, special_texts_);
  if (!parts)
    return unexpected(std::move(parts).error());
  return jinja_template::tokens_of(*parts, *this, special_texts_);
}

std::vector<token_id> gguf_tokenizer::encode(std::string_view text, bool parse_special) const {
  if (text.empty() || text.size() > static_cast<std::size_t>(INT32_MAX))
    return {};
  const auto length = static_cast<std::int32_t>(text.size());
  // A token covers at least one byte (plus a possible leading space), so this rarely retries.
  std::vector<llama_token> ids(text.size() + 2);
  auto n = llama_tokenize(vocab_, text.data(), length, ids.data(), static_cast<std::int32_t>(ids.size()),
                          false, parse_special);
  if (n < 0) {
    ids.resize(static_cast<std::size_t>(-n));
    n = llama_tokenize(vocab_, text.data(), length, ids.data(), static_cast<std::int32_t>(ids.size()),
                       false, parse_special);
  }
  if (n < 0)
    return {};
  return {ids.begin(), ids.begin() + n};
}

std::string gguf_tokenizer::decode(std::span<const token_id> tokens) const {
  std::string out;
  char buffer[256];
  for (auto id : tokens) {
    if (id >= size_)
      continue;
    const auto t = static_cast<llama_token>(id);
    auto n = llama_token_to_piece(vocab_, t, buffer, sizeof buffer, 0, false);
    if (n >= 0) {
      out.append(buffer, static_cast<std::size_t>(n));
      continue;
    }
    std::string piece(static_cast<std::size_t>(-n), '\0');
    n = llama_token_to_piece(vocab_, t, piece.data(), static_cast<std::int32_t>(piece.size()), 0, false);
    if (n > 0)
      out.append(piece.data(), static_cast<std::size_t>(n));
  }
  return out;
}

std::optional<token_id> gguf_tokenizer::special_token(std::string_view text) const noexcept {
  const auto it = specials_.find(text);
  if (it == specials_.end())
    return std::nullopt;
  return it->second;
}

} // namespace kvlane::backends
