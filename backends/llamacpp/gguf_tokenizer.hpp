#pragma once

// kvlane::backends::gguf_tokenizer — a GGUF model's own tokenizer, through llama.cpp's vocab.
//
// Problem it solves: a GGUF carries its vocabulary, merges, pre-tokenizer type and special
// tokens; llama.cpp tokenizes with exactly what the model was converted with. kvlane's
// tokenizer interface is served from it, so prompts, stop tokens and decoded text of a
// llamacpp model match what llama-server would produce on the same file.
//
// Thread contract: immutable after construction; every method is safe from any thread
// (llama.cpp's tokenize and token_to_piece only read the vocab). The vocab belongs to the
// model, which must outlive this object.

#include "backends/backend.hpp"
#include "backends/jinja/jinja_template.hpp"

#include <memory>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

struct llama_vocab;

namespace kvlane::backends {

class gguf_tokenizer final : public tokenizer {
public:
  /// `chat_template`: the model's (or the configured override).
  gguf_tokenizer(const llama_vocab* vocab, std::string chat_template);

  std::vector<token_id> encode(std::string_view text, bool parse_special = false) const override;
  std::string decode(std::span<const token_id> tokens) const override;
  std::optional<token_id> bos() const noexcept override { return bos_; }
  std::span<const token_id> stop_tokens() const noexcept override { return stop_; }
  std::optional<token_id> special_token(std::string_view text) const noexcept override;
  std::uint32_t size() const noexcept override { return size_; }
  std::string_view chat_template() const noexcept override { return chat_template_; }
  expected<std::vector<token_id>, backend_error>
  apply_chat_template(std::span<const chat_message> messages, std::span<const chat_tool> tools,
                      bool add_generation_prompt) const override;

private:
  const llama_vocab* vocab_;
  std::uint32_t size_ = 0;
  std::optional<token_id> bos_;
  std::vector<token_id> stop_;
  struct text_hash {
    using is_transparent = void;
    std::size_t operator()(std::string_view s) const noexcept { return std::hash<std::string_view>{}(s); }
  };
  /// Control and user-defined tokens by text.
  std::unordered_map<std::string, token_id, text_hash, std::equal_to<>> specials_;
  std::string chat_template_;
  std::vector<std::pair<std::string, token_id>> special_texts_; ///< longest first
  std::unique_ptr<jinja_template> jinja_; ///< parsed chat_template_, when it parses
  std::string jinja_error_;                ///< why it does not, else empty
};

} // namespace kvlane::backends
