#include "common/grammar/memo_walk.hpp"

#include <algorithm>
#include <bit>

namespace kvlane::grammar {

namespace {

void merge_left(memo_walk::need& n, std::uint32_t j) {
  if (n.left == memo_walk::none) n.left = j;
  else if (n.left != j) n.ambiguous = true;
}

} // namespace

void memo_walk::reset(const matcher& m, std::uint32_t abstract) {
  m_ = &m;
  g_ = &m.rules();
  abstract_ = abstract;
  states_.clear();
  ids_.clear();
}

std::int32_t memo_walk::start(const matcher& m) {
  std::vector<xstack> heads;
  const std::size_t k = m.history_.size() - 1;
  for (std::uint32_t h = m.heads_begin(k); h < m.history_.back().heads_end; ++h) {
    const matcher::node& n = m.nodes_[m.heads_[h]];
    heads.push_back({{{n.pos, n.count}}, n.parent, 0, 0});
  }
  std::uint32_t offset = 0;
  return intern(std::move(heads), m.can_end(), false, {}, offset);
}

void memo_walk::encode(std::string& out, const xstack& s) {
  const auto n = static_cast<std::uint32_t>(s.f.size());
  out.append(reinterpret_cast<const char*>(&n), 4);
  out.append(reinterpret_cast<const char*>(s.f.data()), s.f.size() * sizeof(frame));
  out.append(reinterpret_cast<const char*>(&s.old), 4);
  out.append(reinterpret_cast<const char*>(&s.j), 4);
  out.push_back(static_cast<char>(s.tag));
}

std::int32_t memo_walk::intern(std::vector<xstack>&& heads, bool accept, bool ctx_exit, need popped,
                               std::uint32_t& offset) {
  // Relative counts: the smallest j of the state becomes 0 and is returned as the offset.
  std::uint32_t base = std::min(popped.inside, popped.left);
  for (const xstack& h : heads) base = std::min(base, h.j);
  if (base == none) base = 0;
  offset = base;
  need at;
  if (accept) at.inside = 0;
  if (popped.inside != none) at.inside = std::min(at.inside, popped.inside - base);
  if (popped.left != none) {
    at.left = popped.left - base;
    at.ambiguous = popped.ambiguous;
    popped.left -= base;
  }
  if (popped.inside != none) popped.inside -= base;
  for (xstack& h : heads) {
    h.j -= base;
    if (h.tag == 2) merge_left(at, h.j);
    else at.inside = std::min(at.inside, h.j);
  }

  std::vector<std::string> keys(heads.size());
  for (std::size_t i = 0; i < heads.size(); ++i) encode(keys[i], heads[i]);
  std::vector<std::size_t> order(heads.size());
  for (std::size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) { return keys[a] < keys[b]; });
  key_.assign(1, static_cast<char>('a' + (accept ? 1 : 0) + (ctx_exit ? 2 : 0) + (popped.ambiguous ? 4 : 0)));
  key_.append(reinterpret_cast<const char*>(&popped.inside), 4);
  key_.append(reinterpret_cast<const char*>(&popped.left), 4);
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
  s.popped = popped;
  s.at = at;
  classify(s);
  states_.push_back(std::move(s));
  ids_.emplace(key_, static_cast<std::uint32_t>(states_.size() - 1));
  return static_cast<std::int32_t>(states_.size() - 1);
}

void memo_walk::classify(state& s) const {
  const auto elements = g_->elements();
  std::vector<std::uint32_t> classes;
  for (const auto& h : s.heads) classes.push_back(elements[h.f.back().pos].arg);
  std::sort(classes.begin(), classes.end());
  classes.erase(std::unique(classes.begin(), classes.end()), classes.end());
  std::size_t n_classes = 0;
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
    n_classes = words.size();
  } else {
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
    n_classes = signatures.size();
  }
  // More than 254 distinct signatures cannot happen with 256 bytes minus the dead ones sharing
  // 255, except in a grammar with 255+ classes at one state; those bytes share class 254 and
  // the transition for it is then recomputed per byte (see next()).
  s.trans.assign(std::min<std::size_t>(n_classes, 255), unknown);
  s.offset.assign(s.trans.size(), 0);
}

std::int32_t memo_walk::step(std::uint32_t from, std::uint8_t b, std::uint32_t& offset) {
  const auto elements = g_->elements();
  work_.clear();
  for (const auto& h : states_[from].heads) {
    if (!g_->cls(elements[h.f.back().pos].arg).has(b)) continue;
    xstack s = h;
    s.f.back() = {s.f.back().pos + 1, 0};
    if (s.tag == 1) s.tag = 2;
    work_.push_back(std::move(s));
  }
  std::vector<xstack> heads;
  bool accept = false, ctx_exit = false;
  need popped;
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
    const frame top = s.f.back();
    const element& e = elements[top.pos];
    if (e.k == element::kind::bytes) {
      heads.push_back(std::move(s));
    } else if (e.k == element::kind::end) {
      s.f.pop_back();
      if (!s.f.empty()) {
        work_.push_back(std::move(s));
        continue;
      }
      if (s.old == matcher::nil) { accept = true; continue; }
      if (s.old == matcher::ctx) {
        ctx_exit = true;
        if (s.tag == 2) merge_left(popped, s.j);
        else popped.inside = std::min(popped.inside, s.j);
        continue;
      }
      const matcher::node& node = m_->nodes_[s.old];
      if (s.old == abstract_) {
        // The repetition of unknown count: another item (one more started) or leave it (the
        // stack is then tagged, its count kept for the check against the real count).
        const repetition& r = g_->rep(elements[node.pos].arg);
        xstack out{{{node.pos + 1, 0}}, node.parent, s.j, 1};
        work_.push_back(std::move(out));
        for (std::uint32_t alt : g_->alternatives(r.item)) work_.push_back({{{alt, 0}}, abstract_, s.j + 1, 0});
        continue;
      }
      s.f.push_back({node.pos, node.count});
      s.old = node.parent;
      work_.push_back(std::move(s));
    } else if (e.k == element::kind::ref) { // as the matcher, a tail reference pushes no return position
      const bool tail = elements[top.pos + 1].k == element::kind::end;
      if (tail) s.f.pop_back();
      else s.f.back() = {top.pos + 1, 0};
      auto alts = g_->alternatives(e.arg);
      for (auto it = alts.rbegin(); it != alts.rend(); ++it) {
        xstack t = s;
        t.f.push_back({*it, 0});
        work_.push_back(std::move(t));
      }
    } else { // a repetition with its count, as the matcher
      const repetition& r = g_->rep(e.arg);
      if (top.count < r.max) {
        for (std::uint32_t alt : g_->alternatives(r.item)) {
          xstack t = s;
          t.f.back().count = r.after(top.count);
          t.f.push_back({alt, 0});
          work_.push_back(std::move(t));
        }
      }
      if (top.count >= r.min) {
        s.f.back() = {top.pos + 1, 0};
        work_.push_back(std::move(s));
      }
    }
  }
  if (heads.empty() && !accept && !ctx_exit) return dead;
  return intern(std::move(heads), accept, ctx_exit, popped, offset);
}

void fill_mask_memo(matcher& m, const vocabulary& v, std::span<std::uint64_t> bits) {
  // A state that takes few first bytes has a small walk, which the stepwise walk does without
  // the memo's set-up cost.
  const byte_class first = m.next_bytes();
  int first_bytes = 0;
  for (std::uint64_t w : first.bits) first_bytes += std::popcount(w);
  if (first_bytes <= 8) {
    fill_mask(m, v, bits);
    return;
  }
  thread_local memo_walk w;
  std::fill(bits.begin(), bits.begin() + static_cast<std::ptrdiff_t>(v.words()), 0);
  const bool ok = w.walk(
      m, v,
      [&](std::uint32_t n, bool, const memo_walk::need&) {
        for (std::uint32_t j = v.ids_begin_[n]; j < v.ids_begin_[n + 1]; ++j)
          bits[v.ids_[j] >> 6] |= std::uint64_t{1} << (v.ids_[j] & 63);
      },
      [](std::uint32_t, bool) {});
  if (!ok) {
    fill_mask(m, v, bits);
    return;
  }
  if (m.can_end())
    for (std::uint32_t e : v.end_tokens()) bits[e >> 6] |= std::uint64_t{1} << (e & 63);
}

} // namespace kvlane::grammar
