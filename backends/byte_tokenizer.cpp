#include "backends/byte_tokenizer.hpp"

namespace kvlane::backends {

std::vector<token_id> byte_tokenizer::encode(std::string_view text) const {
  std::vector<token_id> out;
  out.reserve(text.size());
  for (char c : text)
    out.push_back(static_cast<unsigned char>(c));
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

} // namespace kvlane::backends
