#include "common/grammar/vocabulary.hpp"

#include <algorithm>
#include <numeric>

namespace kvlane::grammar {

vocabulary::vocabulary(std::span<const std::string> tokens, std::span<const std::uint32_t> end_tokens)
    : size_(static_cast<std::uint32_t>(tokens.size())), bytes_(tokens.begin(), tokens.end()) {
  for (std::uint32_t e : end_tokens)
    if (e < size_) end_.push_back(e);
  std::vector<std::uint32_t> order;
  for (std::uint32_t i = 0; i < size_; ++i)
    if (!bytes_[i].empty()) order.push_back(i);
  std::sort(order.begin(), order.end(), [&](std::uint32_t a, std::uint32_t b) {
    return bytes_[a] != bytes_[b] ? bytes_[a] < bytes_[b] : a < b;
  });
  // Preorder construction from the sorted tokens: `path` holds the open nodes of the previous
  // token; a token reuses its common prefix with it and opens one node per remaining byte.
  byte_.push_back(0);
  depth_.push_back(0);
  next_.push_back(0);
  std::vector<std::vector<std::uint32_t>> ids_of{{}};
  std::vector<std::uint32_t> path{0};
  std::string_view prev;
  for (std::uint32_t id : order) {
    std::string_view t = bytes_[id];
    std::size_t common = 0;
    while (common < prev.size() && common < t.size() && prev[common] == t[common]) ++common;
    const std::size_t d = std::min<std::size_t>(t.size(), 0xFFFF);
    common = std::min(common, d);
    while (path.size() > common + 1) {
      next_[path.back()] = static_cast<std::uint32_t>(byte_.size());
      path.pop_back();
    }
    for (std::size_t k = common; k < d; ++k) {
      path.push_back(static_cast<std::uint32_t>(byte_.size()));
      byte_.push_back(static_cast<std::uint8_t>(t[k]));
      depth_.push_back(static_cast<std::uint16_t>(k + 1));
      next_.push_back(0);
      ids_of.emplace_back();
    }
    if (t.size() == d) ids_of[path.back()].push_back(id);
    prev = t;
  }
  while (!path.empty()) {
    next_[path.back()] = static_cast<std::uint32_t>(byte_.size());
    path.pop_back();
  }
  ids_begin_.reserve(ids_of.size() + 1);
  for (auto& v : ids_of) {
    ids_begin_.push_back(static_cast<std::uint32_t>(ids_.size()));
    ids_.insert(ids_.end(), v.begin(), v.end());
  }
  ids_begin_.push_back(static_cast<std::uint32_t>(ids_.size()));
}

namespace {

void set_ends(const matcher& m, const vocabulary& v, std::span<std::uint64_t> bits) {
  if (!m.can_end()) return;
  for (std::uint32_t e : v.end_tokens()) bits[e >> 6] |= std::uint64_t{1} << (e & 63);
}

} // namespace

void fill_mask(matcher& m, const vocabulary& v, std::span<std::uint64_t> bits) {
  std::fill(bits.begin(), bits.begin() + static_cast<std::ptrdiff_t>(v.words()), 0);
  const std::size_t base = m.position();
  const auto n_nodes = static_cast<std::uint32_t>(v.byte_.size());
  // next[d]: the bytes the state at depth d accepts, so that a child whose byte is not among
  // them is skipped with its subtree without a matcher step.
  thread_local std::vector<byte_class> next;
  next.resize(std::max<std::size_t>(next.size(), 2));
  next[0] = m.next_bytes();
  std::uint32_t n = 1;
  while (n < n_nodes) {
    const std::size_t d = v.depth_[n];
    if (!next[d - 1].has(v.byte_[n])) { n = v.next_[n]; continue; }
    if (m.position() != base + d - 1) m.rollback_to(base + d - 1);
    if (!m.feed(v.byte_[n])) { n = v.next_[n]; continue; }
    for (std::uint32_t k = v.ids_begin_[n]; k < v.ids_begin_[n + 1]; ++k) {
      const std::uint32_t id = v.ids_[k];
      bits[id >> 6] |= std::uint64_t{1} << (id & 63);
    }
    if (v.next_[n] != n + 1) { // has children
      if (next.size() <= d) next.resize(d + 1);
      next[d] = m.next_bytes();
    }
    ++n;
  }
  m.rollback_to(base);
  set_ends(m, v, bits);
}

void fill_mask_naive(matcher& m, const vocabulary& v, std::span<std::uint64_t> bits) {
  std::fill(bits.begin(), bits.begin() + static_cast<std::ptrdiff_t>(v.words()), 0);
  const std::size_t base = m.position();
  for (std::uint32_t id = 0; id < v.size(); ++id) {
    std::string_view t = v.bytes(id);
    if (t.empty()) continue;
    if (m.feed(t)) {
      bits[id >> 6] |= std::uint64_t{1} << (id & 63);
      m.rollback_to(base);
    }
  }
  set_ends(m, v, bits);
}

} // namespace kvlane::grammar
