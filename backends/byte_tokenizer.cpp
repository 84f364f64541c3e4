#include "backends/byte_tokenizer.hpp"

namespace kvlane::backends {

std::vector<token_id> byte_tokenizer::encode(std::string_view text, bool parse_special) const {
  std::vector<token_id> out;
  out.reserve(text.size());
  std::size_t i = 0;
  while (i < text.size()) {
    if (parse_special && text[i] == '<') {
      const auto rest = text.substr(i);
      if (rest.starts_with(im_start_text)) {
        out.push_back(im_start_token);
        i += im_start_text.size();
        continue;
      }
      if (rest.starts_with(im_end_text)) {
        out.push_back(im_end_token);
        i += im_end_text.size();
        continue;
      }
    }
    out.push_back(static_cast<unsigned char>(text[i]));
    ++i;
  }
  return out;
}

std::string byte_tokenizer::decode(std::span<const token_id> tokens) const {
  std::string out;
  out.reserve(tokens.size());
  for (token_id t : tokens)
    if (t < 256)
      out.push_back(static_cast<char>(static_cast<unsigned char>(t)));
  return out;
}

std::optional<token_id> byte_tokenizer::special_token(std::string_view text) const noexcept {
  if (text == im_start_text)
    return im_start_token;
  if (text == im_end_text)
    return im_end_token;
  return std::nullopt;
}

} // namespace kvlane::backends
