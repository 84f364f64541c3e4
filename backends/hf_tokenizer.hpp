#pragma once

// kvlane::backends::hf_tokenizer — a model's own tokenizer, from Hugging Face files.
//
// Problem it solves: a real model only understands the ids its own tokenizer
// produces. This loads the byte-level BPE tokenizers of Llama 3.x and
// Qwen2.5/Qwen3 from tokenizer.json (+ tokenizer_config.json and
// generation_config.json beside it) and encodes as Hugging Face does:
//
//   added tokens (when parse_special)  split the text first, leftmost-longest
//   normalizer                         none | NFC | Sequence of NFC
//   pre_tokenizer                      Split (Regex or String, Isolated) | ByteLevel | Sequence
//   model                              BPE over bytes: ranked merges as "a b" or [a, b],
//                                      ignore_merges, no dropout, no unknown token
//   post_processor                     none | ByteLevel | TemplateProcessing | Sequence:
//                                      only says which BOS a prompt starts with
//   decoder                            ByteLevel: tokens decode to their raw bytes
//
// Any other component, option or malformed value is a load error that names
// it; nothing is silently ignored that would change the ids.
//
// Stop tokens: generation_config.json eos_token_id (one id or a list), then
// tokenizer_config.json eos_token, without duplicates.
//
// Immutable after load apart from the BPE word cache (internally locked):
// every method is safe from any thread.

#include "backends/added_tokens.hpp"
#include "backends/backend.hpp"
#include "backends/bpe_model.hpp"
#include "backends/split_regex.hpp"
#include "common/expected.hpp"

#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

namespace kvlane::backends {

struct hf_tokenizer_parts; // what the loader assembles (hf_tokenizer.cpp)
class jinja_template;      // jinja/jinja_template.hpp

class hf_tokenizer final : public tokenizer {
public:
  /// Files larger than this are refused (tokenizer.json is ~11 MB for Qwen3).
  static constexpr std::uintmax_t max_file_bytes = 256u << 20;
  /// Token ids at or above this are refused (bounds the decode table).
  static constexpr std::uint32_t max_token_id = 1u << 24;

  /// Loads `path`: a directory holding tokenizer.json, or that file itself.
  /// tokenizer_config.json and generation_config.json beside it are read when present.
  static expected<std::unique_ptr<hf_tokenizer>, backend_error> load(const std::filesystem::path& path);

  /// The same from the files' contents (an empty view: the file is absent).
  static expected<std::unique_ptr<hf_tokenizer>, backend_error>
  parse(std::string_view tokenizer_json, std::string_view tokenizer_config_json = {},
        std::string_view generation_config_json = {});

  std::vector<token_id> encode(std::string_view text, bool parse_special = false) const override;
  std::string decode(std::span<const token_id> tokens) const override;
  std::optional<token_id> bos() const noexcept override { return bos_; }
  std::span<const token_id> stop_tokens() const noexcept override { return stop_; }
  std::optional<token_id> special_token(std::string_view text) const noexcept override;
  std::uint32_t size() const noexcept override { return size_; }
  /// tokenizer_config.json's chat_template (the "default" one of a list), empty if none.
  std::string_view chat_template() const noexcept override { return chat_template_; }
  /// Renders chat_template() through llama.cpp's Jinja engine (builds with llama.cpp).
  expected<std::vector<token_id>, backend_error>
  apply_chat_template(std::span<const chat_message> messages, std::span<const chat_tool> tools,
                      bool add_generation_prompt) const override;

  /// Whether `id` is an added token marked special (it decodes to nothing).
  bool is_special(token_id id) const noexcept {
    return id < special_.size() && special_[id] != 0;
  }

private:
  explicit hf_tokenizer(hf_tokenizer_parts p);
  void encode_text(std::string_view text, std::vector<token_id>& out) const;
  void split_from(std::size_t level, std::string_view text, std::vector<token_id>& out) const;

  bpe_model model_;
  std::vector<split_regex> splits_;
  bool nfc_ = false;
  added_tokens added_;
  std::unordered_map<std::string, token_id, bpe_model::string_hash, std::equal_to<>> added_by_text_;
  std::vector<std::string> bytes_of_;      // id -> raw bytes ("" for specials and unused ids)
  std::vector<std::uint8_t> special_;      // id -> 1 if a special added token
  std::optional<token_id> bos_;
  std::vector<token_id> stop_;
  std::uint32_t size_ = 0;
  std::string chat_template_;
  std::string bos_text_, eos_text_;  ///< tokenizer_config.json's bos_token / eos_token
  /// Every added token's text, longest first: where a template's own text is split.
  std::vector<std::pair<std::string, token_id>> special_texts_;
  /// chat_template_ parsed (shared_ptr: its deleter exists only in builds with the engine).
  std::shared_ptr<const jinja_template> jinja_;
  std::string jinja_error_;          ///< why chat_template_ did not parse, else empty
};

} // namespace kvlane::backends
