#include "common/grammar/mask_cache.hpp"

#include "common/grammar/memo_walk.hpp"

#include <algorithm>
#include <cstring>

namespace kvlane::grammar {

mask_cache::mask_cache(std::shared_ptr<const grammar> g, std::shared_ptr<const vocabulary> v, mask_cache_limits lim)
    : g_(std::move(g)), v_(std::move(v)), lim_(lim) {
  if (lim_.frames == 0) lim_.frames = 1;
}

mask_cache::stats mask_cache::counters() const {
  std::lock_guard lock{mu_};
  return stats_;
}

std::shared_ptr<const mask_cache::entry> mask_cache::build(std::span<const std::uint32_t> frames, bool bottom) const {
  const vocabulary& v = *v_;
  const matcher lm{g_, frames, bottom};
  auto e = std::make_shared<entry>();
  std::vector<std::uint32_t> accepted;
  // A subtree cut below a state that ran past the frames is uncertain, not rejected: the
  // caller's frames may take the rest of those tokens.
  thread_local memo_walk w;
  const bool ok = w.walk(
      lm, v,
      [&](std::uint32_t n) {
        for (std::uint32_t k = v.ids_begin_[n]; k < v.ids_begin_[n + 1]; ++k) accepted.push_back(v.ids_[k]);
      },
      [&](std::uint32_t n, bool past) {
        if (!past) return;
        for (std::uint32_t k = n; k < v.next_[n]; ++k)
          if (v.ids_begin_[k] < v.ids_begin_[k + 1]) e->uncertain.push_back(k);
      });
  if (!ok) return nullptr;
  if (accepted.size() * 32 > v.words() * 64) {
    e->accepted_bits.assign(v.words(), 0);
    for (std::uint32_t id : accepted) e->accepted_bits[id >> 6] |= std::uint64_t{1} << (id & 63);
  } else {
    e->accepted_ids = std::move(accepted);
  }
  return e;
}

void mask_cache::fill(matcher& m, std::span<std::uint64_t> bits) {
  const vocabulary& v = *v_;
  // The key of each stack: its top frames' positions, and whether the stack ends there.
  struct key_t {
    std::string text;
    std::vector<std::uint32_t> frames;
    bool bottom = false;
  };
  std::vector<key_t> keys;
  const std::size_t k = m.history_.size() - 1;
  for (std::uint32_t h = m.heads_begin(k); h < m.history_.back().heads_end; ++h) {
    key_t key;
    std::uint32_t n = m.heads_[h];
    while (key.frames.size() < lim_.frames && n != matcher::nil) {
      key.frames.push_back(m.nodes_[n].pos);
      n = m.nodes_[n].parent;
    }
    key.bottom = n == matcher::nil;
    key.text.resize(key.frames.size() * 4 + 1);
    std::memcpy(key.text.data(), key.frames.data(), key.frames.size() * 4);
    key.text.back() = key.bottom ? 'b' : 'c';
    if (std::none_of(keys.begin(), keys.end(), [&](const key_t& o) { return o.text == key.text; }))
      keys.push_back(std::move(key));
  }

  std::vector<std::shared_ptr<const entry>> found(keys.size());
  std::vector<std::size_t> to_build;
  bool fallback = false;
  {
    std::lock_guard lock{mu_};
    for (std::size_t i = 0; i < keys.size(); ++i) {
      if (auto it = entries_.find(keys[i].text); it != entries_.end()) { found[i] = it->second; continue; }
      std::uint32_t& met = seen_[keys[i].text];
      if (++met >= build_after_ && stats_.bytes < lim_.max_bytes) to_build.push_back(i);
      else fallback = true;
    }
    if (fallback) ++stats_.plain_walks;
    else if (to_build.empty()) ++stats_.hits;
  }
  if (fallback) {
    fill_mask_memo(m, v, bits);
    return;
  }
  for (std::size_t i : to_build) {
    found[i] = build(keys[i].frames, keys[i].bottom);
    if (found[i] == nullptr) { // past the walk's bounds: this key is answered by plain walks
      fill_mask_memo(m, v, bits);
      return;
    }
    std::lock_guard lock{mu_};
    if (entries_.emplace(keys[i].text, found[i]).second) {
      stats_.bytes += found[i]->bytes();
      ++stats_.entries;
      seen_.erase(keys[i].text);
    }
  }

  std::fill(bits.begin(), bits.begin() + static_cast<std::ptrdiff_t>(v.words()), 0);
  std::vector<std::uint32_t> uncertain;
  for (const auto& e : found) {
    if (!e->accepted_bits.empty())
      for (std::size_t w = 0; w < v.words(); ++w) bits[w] |= e->accepted_bits[w];
    for (std::uint32_t id : e->accepted_ids) bits[id >> 6] |= std::uint64_t{1} << (id & 63);
    uncertain.insert(uncertain.end(), e->uncertain.begin(), e->uncertain.end());
  }
  if (found.size() > 1) {
    std::sort(uncertain.begin(), uncertain.end());
    uncertain.erase(std::unique(uncertain.begin(), uncertain.end()), uncertain.end());
  }
  // The uncertain tokens against the real state, in trie order: a token reuses the states of
  // the bytes it shares with the previous one, and one that extends a rejected prefix is
  // rejected unfed. The memoized walk first; the matcher itself if that passes its bounds.
  auto is_set = [&](std::uint32_t node) {
    const std::uint32_t first = v.ids_[v.ids_begin_[node]];
    return ((bits[first >> 6] >> (first & 63)) & 1) != 0;
  };
  auto set_node = [&](std::uint32_t node) {
    for (std::uint32_t j = v.ids_begin_[node]; j < v.ids_begin_[node + 1]; ++j)
      bits[v.ids_[j] >> 6] |= std::uint64_t{1} << (v.ids_[j] & 63);
  };
  thread_local memo_walk w;
  if (w.check(m, v, uncertain, is_set, set_node)) {
    if (m.can_end())
      for (std::uint32_t e : v.end_tokens()) bits[e >> 6] |= std::uint64_t{1} << (e & 63);
    return;
  }
  const std::size_t base = m.position();
  std::string_view prev;
  std::size_t ok_len = 0;
  for (std::uint32_t node : uncertain) {
    const std::uint32_t first = v.ids_[v.ids_begin_[node]];
    if ((bits[first >> 6] >> (first & 63)) & 1) continue;
    const std::string_view t = v.bytes(first);
    std::size_t l = 0;
    while (l < prev.size() && l < t.size() && prev[l] == t[l]) ++l;
    prev = t;
    if (l > ok_len) continue;
    m.rollback_to(base + l);
    std::size_t fed = l;
    while (fed < t.size() && m.feed(static_cast<std::uint8_t>(t[fed]))) ++fed;
    ok_len = fed;
    if (fed == t.size())
      for (std::uint32_t j = v.ids_begin_[node]; j < v.ids_begin_[node + 1]; ++j)
        bits[v.ids_[j] >> 6] |= std::uint64_t{1} << (v.ids_[j] & 63);
  }
  m.rollback_to(base);
  if (m.can_end())
    for (std::uint32_t e : v.end_tokens()) bits[e >> 6] |= std::uint64_t{1} << (e & 63);
}

} // namespace kvlane::grammar
