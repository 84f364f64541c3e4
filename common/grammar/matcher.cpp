#include "common/grammar/matcher.hpp"

#include <algorithm>
#include <cstring>

namespace kvlane::grammar {

matcher::matcher(std::shared_ptr<const grammar> g, matcher_limits lim) : g_(std::move(g)), lim_(lim) {
  for (std::uint32_t start : g_->alternatives(g_->root())) work_.push_back({start, 0, nil});
  bool accept = false, ctx_exit = false;
  if (!close(accept, ctx_exit)) {
    // Past a bound already (a grammar with exponentially many ways to start): a matcher that
    // takes nothing, rather than one that silently lost stacks.
    exhausted_ = true;
    work_.clear();
    heads_.clear();
    nodes_.clear();
    accept = false;
  }
  history_.push_back({static_cast<std::uint32_t>(heads_.size()), static_cast<std::uint32_t>(nodes_.size()), accept});
}

matcher::matcher(std::shared_ptr<const grammar> g, std::span<const std::uint32_t> frames, bool bottom)
    : g_(std::move(g)) {
  std::uint32_t parent = bottom ? nil : ctx;
  for (auto it = frames.rbegin(); it != frames.rend(); ++it) {
    nodes_.push_back({*it, parent});
    parent = static_cast<std::uint32_t>(nodes_.size() - 1);
  }
  heads_.push_back(parent);
  history_.push_back({1, static_cast<std::uint32_t>(nodes_.size()), false});
}

bool matcher::first_visit(const pending& p) {
  const seen_key key{(static_cast<std::uint64_t>(p.pos) << 32) | p.parent, p.count};
  if (seen_.size() < 64) {
    if (std::find(seen_.begin(), seen_.end(), key) != seen_.end()) return false;
    seen_.push_back(key);
    if (seen_.size() == 64) seen_many_.insert(seen_.begin(), seen_.end());
    return true;
  }
  return seen_many_.insert(key).second;
}

bool matcher::close(bool& accept, bool& ctx_exit) {
  const auto elements = g_->elements();
  seen_.clear();
  seen_many_.clear();
  std::size_t steps = 0;
  const std::size_t first_head = heads_.size();
  while (!work_.empty()) {
    const pending w = work_.back();
    work_.pop_back();
    if (!first_visit(w)) continue;
    if (++steps > lim_.max_closure || nodes_.size() + 2 > lim_.max_nodes) return false;
    const auto [pos, count, parent] = w;
    const element& e = elements[pos];
    switch (e.k) {
      case element::kind::bytes:
        if (heads_.size() - first_head >= lim_.max_heads) return false;
        heads_.push_back(static_cast<std::uint32_t>(nodes_.size()));
        nodes_.push_back({pos, parent, 0});
        break;
      case element::kind::end:
        if (parent == nil) accept = true;
        else if (parent == ctx) ctx_exit = true;
        else work_.push_back({nodes_[parent].pos, nodes_[parent].count, nodes_[parent].parent});
        break;
      case element::kind::ref: {
        // A reference in tail position returns straight to the caller's caller: no node, so
        // loops (x ::= y x | "") and optional chains do not grow the stack.
        std::uint32_t ret = parent;
        if (elements[pos + 1].k != element::kind::end) {
          ret = static_cast<std::uint32_t>(nodes_.size());
          nodes_.push_back({pos + 1, parent, 0});
        }
        auto alts = g_->alternatives(e.arg);
        for (auto it = alts.rbegin(); it != alts.rend(); ++it) work_.push_back({*it, 0, ret});
        break;
      }
      case element::kind::repeat: {
        // `count` items matched: leave (count >= min) or start another (count < max), whose
        // end returns here with one more.
        const repetition& r = g_->rep(e.arg);
        if (count >= r.min) work_.push_back({pos + 1, 0, parent});
        if (count < r.max) {
          const auto ret = static_cast<std::uint32_t>(nodes_.size());
          nodes_.push_back({pos, parent, r.after(count)});
          auto alts = g_->alternatives(r.item);
          for (auto it = alts.rbegin(); it != alts.rend(); ++it) work_.push_back({*it, 0, ret});
        }
        break;
      }
    }
  }
  return true;
}

bool matcher::feed(std::uint8_t b) {
  const entry cur = history_.back();
  if (history_.size() == 1 && cur.heads_end == 0 && exhausted_) return false;
  const std::uint32_t begin = heads_begin(history_.size() - 1);
  const auto elements = g_->elements();
  work_.clear();
  for (std::uint32_t h = begin; h < cur.heads_end; ++h) {
    const node n = nodes_[heads_[h]];
    if (g_->cls(elements[n.pos].arg).has(b)) work_.push_back({n.pos + 1, 0, n.parent});
  }
  if (work_.empty()) return false;
  bool accept = false, ctx_exit = false;
  const bool ok = close(accept, ctx_exit);
  if (!ok || (heads_.size() == cur.heads_end && !accept && !ctx_exit)) {
    exhausted_ = !ok;
    work_.clear();
    heads_.resize(cur.heads_end);
    nodes_.resize(cur.nodes_end);
    return false;
  }
  exhausted_ = false;
  history_.push_back({static_cast<std::uint32_t>(heads_.size()), static_cast<std::uint32_t>(nodes_.size()), accept, ctx_exit});
  return true;
}

bool matcher::feed(std::string_view bytes) {
  const std::size_t start = position();
  for (char c : bytes) {
    if (!feed(static_cast<std::uint8_t>(c))) {
      const bool ex = exhausted_;
      rollback_to(start);
      exhausted_ = ex;
      return false;
    }
  }
  return true;
}

void matcher::rollback_to(std::size_t pos) {
  if (pos >= history_.size()) return;
  history_.resize(pos + 1);
  heads_.resize(history_.back().heads_end);
  nodes_.resize(history_.back().nodes_end);
  exhausted_ = history_.size() == 1 && history_.back().heads_end == 0 && !history_.back().accept && exhausted_;
}

byte_class matcher::next_bytes() const {
  byte_class out;
  const auto elements = g_->elements();
  for (std::uint32_t h = heads_begin(history_.size() - 1); h < history_.back().heads_end; ++h) {
    const byte_class& c = g_->cls(elements[nodes_[heads_[h]].pos].arg);
    for (int w = 0; w < 4; ++w) out.bits[static_cast<std::size_t>(w)] |= c.bits[static_cast<std::size_t>(w)];
  }
  return out;
}

// ---- save / restore ----------------------------------------------------------------------------
// Layout (native endianness: a state parks and resumes within one host):
//   "KVGM" u32 version, u64 grammar fingerprint, u32 node count, u32 head count, u32 entry count,
//   nodes (u32 pos, u32 parent, u32 count), heads (u32), entries (u32 heads_end, u32 nodes_end,
//   u32 accept).

namespace {

constexpr std::uint32_t save_version = 2; // 2: nodes carry a repetition count

template <class T>
void put(std::string& out, T v) {
  char buf[sizeof(T)];
  std::memcpy(buf, &v, sizeof(T));
  out.append(buf, sizeof(T));
}

struct reader {
  std::string_view in;
  std::size_t at = 0;
  template <class T>
  bool get(T& v) {
    if (in.size() - at < sizeof(T)) return false;
    std::memcpy(&v, in.data() + at, sizeof(T));
    at += sizeof(T);
    return true;
  }
};

} // namespace

std::string matcher::save() const {
  std::string out;
  out.reserve(32 + nodes_.size() * 12 + heads_.size() * 4 + history_.size() * 12);
  out.append("KVGM", 4);
  put(out, save_version);
  put(out, g_->fingerprint());
  put(out, static_cast<std::uint32_t>(nodes_.size()));
  put(out, static_cast<std::uint32_t>(heads_.size()));
  put(out, static_cast<std::uint32_t>(history_.size()));
  for (const node& n : nodes_) { put(out, n.pos); put(out, n.parent); put(out, n.count); }
  for (std::uint32_t h : heads_) put(out, h);
  for (const entry& e : history_) { put(out, e.heads_end); put(out, e.nodes_end); put(out, static_cast<std::uint32_t>(e.accept)); }
  return out;
}

expected<matcher, error> matcher::restore(std::shared_ptr<const grammar> g, std::string_view bytes,
                                          matcher_limits lim) {
  auto bad = [](std::string what) { return unexpected(error{"matcher state", std::move(what)}); };
  reader r{bytes};
  if (bytes.substr(0, 4) != "KVGM") return bad("not a saved matcher state (bad magic)");
  r.at = 4;
  std::uint32_t version = 0, node_count = 0, head_count = 0, entry_count = 0;
  std::uint64_t fp = 0;
  if (!r.get(version) || !r.get(fp) || !r.get(node_count) || !r.get(head_count) || !r.get(entry_count))
    return bad("truncated header");
  if (version != save_version) return bad("unsupported version " + std::to_string(version));
  if (fp != g->fingerprint()) return bad("saved for a different grammar");
  const std::uint64_t need = std::uint64_t{node_count} * 12 + std::uint64_t{head_count} * 4 + std::uint64_t{entry_count} * 12;
  if (need != bytes.size() - r.at) return bad("size does not match the counts in the header");
  if (node_count > lim.max_nodes) return bad("more nodes than the limit");
  if (entry_count == 0) return bad("no states");

  matcher m{g, lim};
  m.nodes_.resize(node_count);
  m.heads_.resize(head_count);
  m.history_.resize(entry_count);
  const auto elements = g->elements();
  for (std::uint32_t i = 0; i < node_count; ++i) {
    node& n = m.nodes_[i];
    r.get(n.pos);
    r.get(n.parent);
    r.get(n.count);
    // A parent is always older than its child, so chains end and every index is in range; only
    // a repetition's frame counts, and never past its bound.
    if (n.pos >= elements.size() || (n.parent != nil && n.parent >= i)) return bad("node " + std::to_string(i) + " out of range");
    const element& at = elements[n.pos];
    const auto most = [&](const repetition& rep) { return rep.max == repetition::unbounded ? std::max(rep.min, 1u) : rep.max; };
    if (at.k == element::kind::repeat ? n.count > most(g->rep(at.arg)) : n.count != 0)
      return bad("node " + std::to_string(i) + " has an invalid repetition count");
  }
  for (std::uint32_t& h : m.heads_) r.get(h);
  std::uint32_t prev_heads = 0, prev_nodes = 0;
  for (std::uint32_t k = 0; k < entry_count; ++k) {
    entry& e = m.history_[k];
    std::uint32_t accept = 0;
    r.get(e.heads_end);
    r.get(e.nodes_end);
    r.get(accept);
    e.accept = accept != 0;
    if (accept > 1 || e.heads_end < prev_heads || e.heads_end > head_count || e.nodes_end < prev_nodes ||
        e.nodes_end > node_count)
      return bad("state " + std::to_string(k) + " out of range");
    for (std::uint32_t h = prev_heads; h < e.heads_end; ++h)
      if (m.heads_[h] >= e.nodes_end || elements[m.nodes_[m.heads_[h]].pos].k != element::kind::bytes)
        return bad("state " + std::to_string(k) + " has an invalid stack");
    prev_heads = e.heads_end;
    prev_nodes = e.nodes_end;
  }
  if (m.history_.back().heads_end != head_count || m.history_.back().nodes_end != node_count)
    return bad("trailing nodes after the last state");
  return m;
}

} // namespace kvlane::grammar
