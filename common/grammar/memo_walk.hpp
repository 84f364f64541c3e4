#pragma once

// kvlane::grammar::fill_mask_memo — the trie walk of fill_mask with its matcher steps memoized.
//
// Problem it solves: walking the vocabulary trie costs one matcher step per trie node it enters
// (~330k for Qwen2 inside a string), yet along those paths the matcher passes through few
// distinct states: inside a string, "one more character consumed" is the same state whichever
// character it was. fill_mask_memo gives each distinct state of one walk an id (its stacks
// spelled out as grammar positions above the nodes of the starting state), splits the 256 bytes
// into the classes that state cannot tell apart, and computes a transition only the first time
// a (state, byte class) pair is met; every other trie node costs two table lookups.
//
// Same result as fill_mask. A state that takes at most 8 distinct first bytes (a small walk) and
// a walk that would intern more than `max_states` states (a grammar that keeps every path
// distinct) use fill_mask's stepwise walk instead.
// Scratch is thread-local; call from any thread, one matcher per thread at a time.

#include "common/grammar/vocabulary.hpp"

#include <algorithm>
#include <array>
#include <bit>
#include <span>
#include <string_view>
#include <string>
#include <unordered_map>
#include <vector>

namespace kvlane::grammar {

/// The walk's scratch and its explicit-stack stepping (a friend of matcher and vocabulary).
class memo_walk {
public:
  memo_walk() = default;
  static constexpr std::uint32_t max_states = 20'000;
  static constexpr std::uint32_t max_work = 8192;
  static constexpr std::int32_t unknown = -1;
  static constexpr std::int32_t dead = -2;

  /// A stack: grammar positions bottom..top above `old`, a node of the starting matcher state
  /// (or matcher::nil).
  struct xstack {
    std::vector<std::uint32_t> pos;
    std::uint32_t old = matcher::nil;
  };
  struct state {
    std::vector<xstack> heads;
    bool accept = false;
    bool ctx_exit = false; ///< a stack ran past a mask_cache frame's bottom (matcher::ctx)
    std::array<std::uint8_t, 256> cls{}; ///< byte -> class (255: no head takes it)
    std::vector<std::int32_t> trans;      ///< per class: next state id, unknown or dead
  };

  const matcher* m_ = nullptr;
  const grammar* g_ = nullptr;
  std::vector<state> states_;
  std::unordered_map<std::string, std::uint32_t> ids_;
  std::vector<xstack> work_;
  std::vector<std::string> seen_;
  std::string key_;

  static std::vector<xstack> start_of(const matcher& m) {
    std::vector<xstack> out;
    const std::size_t k = m.history_.size() - 1;
    for (std::uint32_t h = m.heads_begin(k); h < m.history_.back().heads_end; ++h)
      out.push_back({{m.nodes_[m.heads_[h]].pos}, m.nodes_[m.heads_[h]].parent});
    return out;
  }

  void reset(const matcher& m) {
    m_ = &m;
    g_ = &m.rules();
    states_.clear();
    ids_.clear();
  }

  static void encode(std::string& out, const xstack& s) {
    const std::uint32_t n = static_cast<std::uint32_t>(s.pos.size());
    out.append(reinterpret_cast<const char*>(&n), 4);
    out.append(reinterpret_cast<const char*>(s.pos.data()), s.pos.size() * 4);
    out.append(reinterpret_cast<const char*>(&s.old), 4);
  }

  /// Interns the state made of `heads` (consumed) and `accept`; returns its id, or -1 past the bound.
  std::int32_t intern(std::vector<xstack>&& heads, bool accept, bool ctx_exit = false) {
    std::vector<std::string> keys(heads.size());
    for (std::size_t i = 0; i < heads.size(); ++i) encode(keys[i], heads[i]);
    std::vector<std::size_t> order(heads.size());
    for (std::size_t i = 0; i < order.size(); ++i) order[i] = i;
    std::sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) { return keys[a] < keys[b]; });
    key_.assign(1, static_cast<char>('a' + (accept ? 1 : 0) + (ctx_exit ? 2 : 0)));
    std::vector<xstack> sorted;
    sorted.reserve(heads.size());
    for (std::size_t k = 0; k < order.size(); ++k) {
      if (k > 0 && keys[order[k]] == keys[order[k - 1]]) continue;
      key_ += keys[order[k]];
      sorted.push_back(std::move(heads[order[k]]));
    }
    if (auto it = ids_.find(key_); it != ids_.end()) return static_cast<std::int32_t>(it->second);
    if (states_.size() >= max_states) return -1;
    state s;
    s.heads = std::move(sorted);
    s.accept = accept;
    s.ctx_exit = ctx_exit;
    classify(s);
    states_.push_back(std::move(s));
    ids_.emplace(key_, static_cast<std::uint32_t>(states_.size() - 1));
    return static_cast<std::int32_t>(states_.size() - 1);
  }

  /// Splits the bytes by which heads' classes hold them.
  void classify(state& s) const {
    const auto elements = g_->elements();
    std::vector<std::uint32_t> classes;
    for (const auto& h : s.heads) classes.push_back(elements[h.pos.back()].arg);
    std::sort(classes.begin(), classes.end());
    classes.erase(std::unique(classes.begin(), classes.end()), classes.end());
    if (classes.size() <= 64) { // the usual case: a signature fits a word, no allocation per byte
      std::array<std::uint64_t, 256> sigs{};
      for (std::size_t c = 0; c < classes.size(); ++c) {
        const auto& bits = g_->cls(classes[c]).bits;
        for (unsigned w = 0; w < 4; ++w)
          for (std::uint64_t x = bits[w]; x != 0; x &= x - 1)
            sigs[w * 64 + static_cast<unsigned>(std::countr_zero(x))] |= std::uint64_t{1} << c;
      }
      std::vector<std::uint64_t> words;
      for (unsigned b = 0; b < 256; ++b) {
        const std::uint64_t sig = sigs[b];
        if (sig == 0) { s.cls[b] = 255; continue; }
        auto it = std::find(words.begin(), words.end(), sig);
        if (it == words.end()) {
          words.push_back(sig);
          it = words.end() - 1;
        }
        s.cls[b] = static_cast<std::uint8_t>(std::min<std::ptrdiff_t>(it - words.begin(), 254));
      }
      s.trans.assign(std::min<std::size_t>(words.size(), 255), unknown);
      return;
    }
    std::vector<std::vector<std::uint8_t>> signatures;
    for (unsigned b = 0; b < 256; ++b) {
      std::vector<std::uint8_t> sig(classes.size());
      bool any = false;
      for (std::size_t c = 0; c < classes.size(); ++c) {
        sig[c] = g_->cls(classes[c]).has(static_cast<std::uint8_t>(b));
        any = any || sig[c];
      }
      if (!any) { s.cls[b] = 255; continue; }
      auto it = std::find(signatures.begin(), signatures.end(), sig);
      if (it == signatures.end()) {
        signatures.push_back(std::move(sig));
        it = signatures.end() - 1;
      }
      s.cls[b] = static_cast<std::uint8_t>(std::min<std::ptrdiff_t>(it - signatures.begin(), 254));
    }
    // More than 254 distinct signatures cannot happen with 256 bytes minus the dead ones sharing
    // 255, except in a grammar with 255+ classes at one state; those bytes share class 254 and
    // the transition for it is then recomputed per byte (see step_id).
    s.trans.assign(std::min<std::size_t>(signatures.size(), 255), unknown);
  }

  /// The state after `b` from state `from`: an id, dead, or -1 (bound passed).
  std::int32_t step(std::uint32_t from, std::uint8_t b) {
    const auto elements = g_->elements();
    work_.clear();
    for (const auto& h : states_[from].heads) {
      if (!g_->cls(elements[h.pos.back()].arg).has(b)) continue;
      xstack s = h;
      ++s.pos.back();
      work_.push_back(std::move(s));
    }
    std::vector<xstack> heads;
    bool accept = false, ctx_exit = false;
    seen_.clear();
    std::size_t steps = 0;
    while (!work_.empty()) {
      if (++steps > max_work) return -1;
      xstack s = std::move(work_.back());
      work_.pop_back();
      std::string k;
      encode(k, s);
      if (std::find(seen_.begin(), seen_.end(), k) != seen_.end()) continue;
      seen_.push_back(std::move(k));
      const std::uint32_t p = s.pos.back();
      const element& e = elements[p];
      if (e.k == element::kind::bytes) {
        heads.push_back(std::move(s));
      } else if (e.k == element::kind::end) {
        s.pos.pop_back();
        if (s.pos.empty()) {
          if (s.old == matcher::nil) { accept = true; continue; }
          if (s.old == matcher::ctx) { ctx_exit = true; continue; }
          const auto& node = m_->nodes_[s.old];
          s.pos.push_back(node.pos);
          s.old = node.parent;
        }
        work_.push_back(std::move(s));
      } else { // ref: as the matcher, a tail reference pushes no return position
        const bool tail = elements[p + 1].k == element::kind::end;
        if (tail) s.pos.pop_back();
        else s.pos.back() = p + 1;
        auto alts = g_->alternatives(e.arg);
        for (auto it = alts.rbegin(); it != alts.rend(); ++it) {
          xstack t = s;
          t.pos.push_back(*it);
          work_.push_back(std::move(t));
        }
      }
    }
    if (heads.empty() && !accept && !ctx_exit) return dead;
    return intern(std::move(heads), accept, ctx_exit);
  }

  /// Walks the trie of `v` from `m`'s current state. on_accept(node) for every trie node whose
  /// path the grammar takes; on_reject(node, past) for every subtree cut at `node`, `past` telling
  /// whether a state on the way ran past a frame's bottom. False if a bound was passed.
  template <class OnAccept, class OnReject>
  bool walk(const matcher& m, const vocabulary& v, OnAccept&& on_accept, OnReject&& on_reject) {
    reset(m);
    const std::int32_t root = intern(start_of(m), m.can_end(), false);
    if (root < 0) return false;
    at_depth_.assign(2, root);
    past_.assign(2, 0);
    const auto n_nodes = static_cast<std::uint32_t>(v.byte_.size());
    std::uint32_t n = 1;
    while (n < n_nodes) {
      const std::size_t d = v.depth_[n];
      const auto from = static_cast<std::uint32_t>(at_depth_[d - 1]);
      const std::uint8_t b = v.byte_[n];
      const std::uint8_t c = states_[from].cls[b];
      std::int32_t to = dead;
      if (c == 254) {
        to = step(from, b); // a shared overflow class: never memoized
      } else if (c != 255) {
        to = states_[from].trans[c];
        if (to == unknown) {
          to = step(from, b);
          if (to != -1) states_[from].trans[c] = to;
        }
      }
      if (to == -1) return false;
      if (to == dead) {
        on_reject(n, past_[d - 1] != 0);
        n = v.next_[n];
        continue;
      }
      on_accept(n);
      if (v.next_[n] != n + 1) {
        if (at_depth_.size() <= d) { at_depth_.resize(d + 1); past_.resize(d + 1); }
        at_depth_[d] = to;
        past_[d] = past_[d - 1] || states_[static_cast<std::uint32_t>(to)].ctx_exit;
      }
      ++n;
    }
    return true;
  }

  /// For trie nodes `nodes` (ascending, i.e. in lexicographic order of their bytes) from `m`'s
  /// current state: on_accept(node) for each whose bytes the grammar takes; skip(node) true
  /// leaves a node out. A node reuses the states of the bytes it shares with the previous one.
  /// False if a bound was passed (nothing is then known).
  template <class Skip, class OnAccept>
  bool check(const matcher& m, const vocabulary& v, std::span<const std::uint32_t> nodes, Skip&& skip,
             OnAccept&& on_accept) {
    reset(m);
    const std::int32_t root = intern(start_of(m), m.can_end(), false);
    if (root < 0) return false;
    at_depth_.assign(1, root);
    std::string_view prev;
    std::size_t ok_len = 0;
    for (std::uint32_t node : nodes) {
      if (skip(node)) continue;
      const std::string_view t = v.bytes(v.ids_[v.ids_begin_[node]]);
      std::size_t l = 0;
      while (l < prev.size() && l < t.size() && prev[l] == t[l]) ++l;
      prev = t;
      if (l > ok_len) continue; // extends a rejected prefix
      std::size_t d = l;
      if (at_depth_.size() < t.size() + 1) at_depth_.resize(t.size() + 1);
      for (; d < t.size(); ++d) {
        const auto from = static_cast<std::uint32_t>(at_depth_[d]);
        const auto b = static_cast<std::uint8_t>(t[d]);
        const std::uint8_t c = states_[from].cls[b];
        std::int32_t to = dead;
        if (c == 254) {
          to = step(from, b);
        } else if (c != 255) {
          to = states_[from].trans[c];
          if (to == unknown) {
            to = step(from, b);
            if (to != -1) states_[from].trans[c] = to;
          }
        }
        if (to == -1) return false;
        if (to == dead) break;
        at_depth_[d + 1] = to;
      }
      ok_len = d;
      if (d == t.size()) on_accept(node);
    }
    return true;
  }

private:
  std::vector<std::int32_t> at_depth_;
  std::vector<std::uint8_t> past_;
};



void fill_mask_memo(matcher& m, const vocabulary& v, std::span<std::uint64_t> bits);

} // namespace kvlane::grammar
