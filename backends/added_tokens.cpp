#include "backends/added_tokens.hpp"

#include <algorithm>
#include <cstring>

namespace kvlane::backends {

namespace {
constexpr std::uint32_t none = 0; // the root is never a child
} // namespace

std::uint32_t added_tokens::child(std::uint32_t n, unsigned char b) const noexcept {
  const auto& c = nodes_[n].children;
  const auto it = std::lower_bound(c.begin(), c.end(), b,
                                   [](const auto& e, unsigned char x) { return e.first < x; });
  return it != c.end() && it->first == b ? it->second : none;
}

void added_tokens::add(std::string_view content, token_id id) {
  if (content.empty())
    return;
  first_bytes_.set(static_cast<unsigned char>(content[0]));
  std::uint32_t n = 0;
  for (char ch : content) {
    const auto b = static_cast<unsigned char>(ch);
    std::uint32_t next = child(n, b);
    if (next == none) {
      next = static_cast<std::uint32_t>(nodes_.size());
      nodes_.emplace_back();
      auto& c = nodes_[n].children;
      const auto it = std::lower_bound(c.begin(), c.end(), b,
                                       [](const auto& e, unsigned char x) { return e.first < x; });
      c.insert(it, {b, next});
    }
    n = next;
  }
  nodes_[n].id = id;
}

std::optional<added_tokens::match> added_tokens::find(std::string_view text,
                                                      std::size_t from) const noexcept {
  if (empty())
    return std::nullopt;
  for (std::size_t i = from; i < text.size(); ++i) {
    if (!first_bytes_.test(static_cast<unsigned char>(text[i])))
      continue;
    std::optional<match> best;
    std::uint32_t n = 0;
    for (std::size_t j = i; j < text.size(); ++j) {
      n = child(n, static_cast<unsigned char>(text[j]));
      if (n == none)
        break;
      if (nodes_[n].id >= 0)
        best = match{i, j + 1 - i, static_cast<token_id>(nodes_[n].id)};
    }
    if (best)
      return best;
  }
  return std::nullopt;
}

} // namespace kvlane::backends
