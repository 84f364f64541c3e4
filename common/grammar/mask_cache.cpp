#include "common/grammar/mask_cache.hpp"

#include "common/grammar/memo_walk.hpp"

#include <algorithm>
#include <cstring>

namespace kvlane::grammar {

namespace {

void set_bit(std::span<std::uint64_t> bits, std::uint32_t id) { bits[id >> 6] |= std::uint64_t{1} << (id & 63); }

} // namespace

/// What one stack's top frames make of every token.
struct mask_cache::entry {
  /// Tokens accepted whatever lies below (without a repetition frame: all of them; with one: the
  /// ones that start no item beyond the current one) — a bitset when many, else their ids.
  std::vector<std::uint64_t> accepted_bits;
  std::vector<std::uint32_t> accepted_ids;
  /// With a repetition frame: (items started, token) for the tokens that stay inside it (or leave
  /// it without consuming more), ascending; accepted when the count allows that many more. With
  /// many of them, upto[k] holds those needing at most k as a bitset (k < upto.size()).
  std::vector<std::pair<std::uint32_t, std::uint32_t>> inside;
  std::vector<std::vector<std::uint64_t>> upto;
  /// With a repetition frame: (count on leaving, token) for the tokens that leave it and go on
  /// after it within the frames; accepted when that count is within the bounds.
  std::vector<std::pair<std::uint32_t, std::uint32_t>> left;
  std::vector<std::uint32_t> uncertain; ///< trie nodes, ascending (= lexicographic order)
  std::size_t bytes() const {
    std::size_t b = accepted_bits.size() * 8 + accepted_ids.size() * 4 + inside.size() * 8 + left.size() * 8 +
                    uncertain.size() * 4 + sizeof(entry);
    for (const auto& u : upto) b += u.size() * 8;
    return b;
  }
};

/// A stack's key: its top frames' positions down to the first repetition frame, which is kept
/// without its count (`repeat_node`), or `frames` of them.
struct mask_cache::key_t {
  std::string text;
  std::vector<std::uint32_t> frames; ///< positions, top first
  bool bottom = false;               ///< the stack ends below the last frame
  std::uint32_t repeat_node = matcher::nil; ///< the repetition frame in the real matcher
};

mask_cache::mask_cache(std::shared_ptr<const grammar> g, std::shared_ptr<const vocabulary> v, mask_cache_limits lim)
    : g_(std::move(g)), v_(std::move(v)), lim_(lim) {
  if (lim_.frames == 0) lim_.frames = 1;
}

mask_cache::stats mask_cache::counters() const {
  std::lock_guard lock{mu_};
  return stats_;
}

std::shared_ptr<const mask_cache::entry> mask_cache::build(const key_t& key) const {
  const vocabulary& v = *v_;
  const bool abstract = key.repeat_node != matcher::nil;
  const matcher lm{g_, key.frames, key.bottom};
  auto e = std::make_shared<entry>();
  std::vector<std::uint32_t> accepted;
  auto add_subtree = [&](std::uint32_t n) {
    for (std::uint32_t k = n; k < v.next_[n]; ++k)
      if (v.ids_begin_[k] < v.ids_begin_[k + 1]) e->uncertain.push_back(k);
  };
  // A subtree cut below a state that ran past the frames is uncertain, not rejected: the
  // caller's frames may take the rest of those tokens.
  thread_local memo_walk w;
  const bool ok = w.walk(
      lm, v,
      [&](std::uint32_t n, bool past, const memo_walk::need& nd) {
        if (v.ids_begin_[n] == v.ids_begin_[n + 1]) return;
        if (!abstract) {
          for (std::uint32_t k = v.ids_begin_[n]; k < v.ids_begin_[n + 1]; ++k) accepted.push_back(v.ids_[k]);
          return;
        }
        // With a repetition of unknown count nothing is accepted outright: the paths within the
        // frames are recorded with what they need of the count, and a token that may also run
        // past the frames (or leaves with several counts) is checked against the real state.
        for (std::uint32_t k = v.ids_begin_[n]; k < v.ids_begin_[n + 1]; ++k) {
          if (nd.inside != memo_walk::none) e->inside.push_back({nd.inside, v.ids_[k]});
          if (nd.left != memo_walk::none && !nd.ambiguous) e->left.push_back({nd.left, v.ids_[k]});
        }
        if (past || nd.ambiguous) e->uncertain.push_back(n);
      },
      [&](std::uint32_t n, bool past) {
        if (past) add_subtree(n);
      },
      abstract ? 0 : matcher::nil); // the local matcher's first node is its bottom frame
  if (!ok) return nullptr;
  std::sort(e->uncertain.begin(), e->uncertain.end());
  e->uncertain.erase(std::unique(e->uncertain.begin(), e->uncertain.end()), e->uncertain.end());
  if (abstract) {
    std::sort(e->inside.begin(), e->inside.end());
    // Tokens needing no item beyond the current one are accepted whatever the count.
    auto first_counted = std::find_if(e->inside.begin(), e->inside.end(), [](const auto& p) { return p.first > 0; });
    for (auto it = e->inside.begin(); it != first_counted; ++it) accepted.push_back(it->second);
    e->inside.erase(e->inside.begin(), first_counted);
    // Many counted tokens (a string's inside): a bitset per small count, so a mask ORs one.
    if (e->inside.size() >= 4096) {
      const std::uint32_t most = std::min<std::uint32_t>(e->inside.back().first, 32);
      std::vector<std::uint64_t> cur(v.words(), 0);
      auto it = e->inside.begin();
      for (std::uint32_t k = 0; k <= most; ++k) {
        for (; it != e->inside.end() && it->first <= k; ++it) set_bit(cur, it->second);
        e->upto.push_back(cur);
      }
    }
    std::sort(e->left.begin(), e->left.end());
  }
  if (accepted.size() * 32 > v.words() * 64) {
    e->accepted_bits.assign(v.words(), 0);
    for (std::uint32_t id : accepted) set_bit(e->accepted_bits, id);
  } else {
    e->accepted_ids = std::move(accepted);
  }
  return e;
}

void mask_cache::fill(matcher& m, std::span<std::uint64_t> bits) {
  const vocabulary& v = *v_;
  const auto elements = g_->elements();
  thread_local std::vector<key_t> keys;
  keys.clear();
  const std::size_t k = m.history_.size() - 1;
  for (std::uint32_t h = m.heads_begin(k); h < m.history_.back().heads_end; ++h) {
    key_t key;
    std::uint32_t n = m.heads_[h];
    while (key.frames.size() < lim_.frames && n != matcher::nil) {
      const matcher::node& node = m.nodes_[n];
      key.frames.push_back(node.pos);
      if (elements[node.pos].k == element::kind::repeat) {
        key.repeat_node = n;
        break;
      }
      n = node.parent;
    }
    key.bottom = key.repeat_node == matcher::nil && n == matcher::nil;
    key.text.resize(key.frames.size() * 4);
    std::memcpy(key.text.data(), key.frames.data(), key.frames.size() * 4);
    if (key.repeat_node != matcher::nil) {
      // Neither the repetition's position nor its bounds: its item and what follows it.
      const std::uint32_t at = key.frames.back();
      key.text.resize(key.text.size() - 4);
      key.text += 'r';
      const std::uint32_t item = g_->rep(elements[at].arg).item;
      key.text.append(reinterpret_cast<const char*>(&item), 4);
      for (std::uint32_t p = at + 1; elements[p].k != element::kind::end; ++p) {
        key.text += static_cast<char>(elements[p].k);
        key.text.append(reinterpret_cast<const char*>(&elements[p].arg), 4);
      }
    } else {
      key.text += key.bottom ? 'b' : 'c';
    }
    if (std::none_of(keys.begin(), keys.end(), [&](const key_t& o) {
          return o.text == key.text && o.repeat_node == key.repeat_node;
        }))
      keys.push_back(std::move(key));
  }

  thread_local std::vector<std::shared_ptr<const entry>> found;
  found.assign(keys.size(), nullptr);
  std::vector<std::size_t> to_build;
  bool fallback = false;
  {
    std::lock_guard lock{mu_};
    for (std::size_t i = 0; i < keys.size(); ++i) {
      if (auto it = entries_.find(keys[i].text); it != entries_.end()) { found[i] = it->second; continue; }
      if (stats_.bytes < lim_.max_bytes) to_build.push_back(i);
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
    found[i] = build(keys[i]);
    if (found[i] == nullptr) { // past the walk's bounds: this key is answered by plain walks
      { std::lock_guard lock{mu_}; ++stats_.plain_walks; }
      fill_mask_memo(m, v, bits);
      return;
    }
    std::lock_guard lock{mu_};
    if (entries_.emplace(keys[i].text, found[i]).second) {
      stats_.bytes += found[i]->bytes();
      ++stats_.entries;
    }
  }

  std::fill(bits.begin(), bits.begin() + static_cast<std::ptrdiff_t>(v.words()), 0);
  thread_local std::vector<std::uint32_t> uncertain;
  uncertain.clear();
  bool sorted = true;
  for (std::size_t i = 0; i < found.size(); ++i) {
    const entry& e = *found[i];
    if (!e.accepted_bits.empty())
      for (std::size_t w = 0; w < v.words(); ++w) bits[w] |= e.accepted_bits[w];
    for (std::uint32_t id : e.accepted_ids) set_bit(bits, id);
    if (keys[i].repeat_node != matcher::nil) {
      // The real count: `room` more items may start, leaving needs at least `least` more.
      const matcher::node& rn = m.nodes_[keys[i].repeat_node];
      const repetition& r = g_->rep(elements[rn.pos].arg);
      const std::uint32_t room = r.max - rn.count;
      const std::uint32_t least = r.min > rn.count ? r.min - rn.count : 0;
      auto end = e.inside.end();
      if (!e.upto.empty()) {
        const std::size_t top = e.upto.size() - 1;
        const auto& u = e.upto[std::min<std::size_t>(room, top)];
        for (std::size_t w = 0; w < v.words(); ++w) bits[w] |= u[w];
        if (room > top) {
          auto it = std::upper_bound(e.inside.begin(), e.inside.end(), std::pair{static_cast<std::uint32_t>(top), ~0u});
          for (; it != end && it->first <= room; ++it) set_bit(bits, it->second);
        }
      } else {
        for (auto it = e.inside.begin(); it != end && it->first <= room; ++it) set_bit(bits, it->second);
      }
      auto it = std::lower_bound(e.left.begin(), e.left.end(), std::pair{least, 0u});
      for (; it != e.left.end() && it->first <= room; ++it) set_bit(bits, it->second);
    }
    if (!e.uncertain.empty()) {
      if (!uncertain.empty() && uncertain.back() >= e.uncertain.front()) sorted = false;
      uncertain.insert(uncertain.end(), e.uncertain.begin(), e.uncertain.end());
    }
  }
  if (!sorted) {
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
    for (std::uint32_t j = v.ids_begin_[node]; j < v.ids_begin_[node + 1]; ++j) set_bit(bits, v.ids_[j]);
  };
  thread_local memo_walk w;
  if (w.check(m, v, uncertain, is_set, set_node)) {
    if (m.can_end())
      for (std::uint32_t e : v.end_tokens()) set_bit(bits, e);
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
    if (fed == t.size()) set_node(node);
  }
  m.rollback_to(base);
  if (m.can_end())
    for (std::uint32_t e : v.end_tokens()) set_bit(bits, e);
}

} // namespace kvlane::grammar
