#include "common/grammar/grammar.hpp"

#include "common/random.hpp"

#include <algorithm>
#include <map>

namespace kvlane::grammar {

namespace {

std::string hex_byte(unsigned b) {
  static constexpr char digits[] = "0123456789ABCDEF";
  return std::string{"\\x"} + digits[b >> 4] + digits[b & 15];
}

std::string class_text(const byte_class& c) {
  std::string out = "[";
  for (unsigned b = 0; b < 256;) {
    if (!c.has(static_cast<std::uint8_t>(b))) { ++b; continue; }
    unsigned e = b;
    while (e + 1 < 256 && c.has(static_cast<std::uint8_t>(e + 1))) ++e;
    out += hex_byte(b);
    if (e > b) out += "-" + hex_byte(e);
    b = e + 1;
  }
  return out + "]";
}

} // namespace

std::string grammar::to_gbnf() const {
  std::string out;
  for (std::uint32_t r = 0; r < rule_count(); ++r) {
    out += rules_[r].name + " ::=";
    bool first = true;
    for (std::uint32_t start : alternatives(r)) {
      out += first ? " " : " | ";
      first = false;
      bool empty = true;
      for (std::uint32_t p = start; elements_[p].k != element::kind::end; ++p) {
        if (!empty) out += ' ';
        empty = false;
        const element& e = elements_[p];
        if (e.k == element::kind::ref) out += rules_[e.arg].name;
        else if (e.k == element::kind::bytes) out += class_text(classes_[e.arg]);
        else {
          const repetition& r = repetitions_[e.arg];
          out += rules_[r.item].name + "{" + std::to_string(r.min) + "," +
                 (r.max == repetition::unbounded ? std::string{} : std::to_string(r.max)) + "}";
        }
      }
      if (empty) out += "\"\"";
    }
    out += '\n';
  }
  return out;
}

expected<std::uint32_t, error> grammar_builder::declare(std::string_view name) {
  if (auto it = rule_index_.find(std::string{name}); it != rule_index_.end()) return it->second;
  if (rules_.size() >= lim_.max_rules)
    return unexpected(error{"", "more than " + std::to_string(lim_.max_rules) + " rules"});
  rule_index_.emplace(std::string{name}, static_cast<std::uint32_t>(rules_.size()));
  rules_.push_back({std::string{name}, {}});
  defined_.push_back(false);
  first_ref_.emplace_back();
  return static_cast<std::uint32_t>(rules_.size() - 1);
}

expected<std::uint32_t, error> grammar_builder::fresh(std::string_view base) {
  if (rules_.size() >= lim_.max_rules)
    return unexpected(error{"", "more than " + std::to_string(lim_.max_rules) + " rules"});
  // Generated names contain '#', which GBNF names cannot, so they never collide with user rules.
  rules_.push_back({std::string{base} + "#" + std::to_string(rules_.size()), {}});
  defined_.push_back(false);
  first_ref_.emplace_back();
  return static_cast<std::uint32_t>(rules_.size() - 1);
}

expected<void, error> grammar_builder::add_alternative(std::uint32_t rule, std::span<const element> seq) {
  element_count_ += seq.size() + 1;
  if (element_count_ > lim_.max_elements)
    return unexpected(error{"", "the grammar expands to more than " +
                                    std::to_string(lim_.max_elements) + " elements"});
  rules_[rule].alts.emplace_back(seq.begin(), seq.end());
  defined_[rule] = true;
  return {};
}

std::uint32_t grammar_builder::add_class(const byte_class& c) {
  auto [it, added] = class_index_.emplace(c.bits, static_cast<std::uint32_t>(classes_.size()));
  if (added) classes_.push_back(c);
  return it->second;
}

element grammar_builder::add_repetition(std::uint32_t item, std::uint32_t min, std::uint32_t max) {
  repetitions_.push_back({item, min, max});
  return {element::kind::repeat, static_cast<std::uint32_t>(repetitions_.size() - 1)};
}

void grammar_builder::note_reference(std::uint32_t rule, std::string where) {
  if (first_ref_[rule].empty()) first_ref_[rule] = std::move(where);
}

expected<std::shared_ptr<const grammar>, error> grammar_builder::finish(std::string_view root_name) {
  const auto n = static_cast<std::uint32_t>(rules_.size());
  std::uint32_t root = n;
  for (std::uint32_t i = 0; i < n; ++i) {
    if (!defined_[i])
      return unexpected(error{first_ref_[i], "undefined rule '" + rules_[i].name + "'"});
    if (rules_[i].name == root_name) root = i;
  }
  if (root == n) return unexpected(error{"", "no rule named '" + std::string{root_name} + "'"});

  // Nullable rules, in time linear in the grammar: an alternative without byte classes waits for
  // its references to become nullable (a count per alternative, decremented through a reverse
  // index), so a long chain declared in the worst order costs no more than in the best.
  std::vector<bool> nullable(n, false);
  {
    struct alt_ref { std::uint32_t rule; std::uint32_t alt; };
    std::vector<std::vector<alt_ref>> used_in(n);
    std::vector<std::vector<std::uint32_t>> waiting(n); // per rule, per alternative
    std::vector<std::uint32_t> ready;
    for (std::uint32_t r = 0; r < n; ++r) {
      waiting[r].resize(rules_[r].alts.size());
      for (std::uint32_t a = 0; a < rules_[r].alts.size(); ++a) {
        const auto& alt = rules_[r].alts[a];
        if (std::any_of(alt.begin(), alt.end(), [](const element& e) { return e.k == element::kind::bytes; })) {
          waiting[r][a] = ~0u; // never nullable
          continue;
        }
        // A repetition with min 0 is nullable on its own; with min > 0 when its item is.
        std::uint32_t deps = 0;
        for (const element& e : alt) {
          if (e.k == element::kind::ref) { used_in[e.arg].push_back({r, a}); ++deps; }
          else if (repetitions_[e.arg].min > 0) { used_in[repetitions_[e.arg].item].push_back({r, a}); ++deps; }
        }
        waiting[r][a] = deps;
        if (deps == 0 && !nullable[r]) { nullable[r] = true; ready.push_back(r); }
      }
    }
    while (!ready.empty()) {
      const std::uint32_t s = ready.back();
      ready.pop_back();
      for (const alt_ref& u : used_in[s]) {
        if (--waiting[u.rule][u.alt] == 0 && !nullable[u.rule]) {
          nullable[u.rule] = true;
          ready.push_back(u.rule);
        }
      }
    }
  }
  // An unbounded repetition of something that may match nothing would repeat it forever
  // without consuming (the matcher's count stops growing at min, so the loop never ends).
  for (const repetition& rep : repetitions_)
    if (rep.max == repetition::unbounded && nullable[rep.item])
      return unexpected(error{"", "an unbounded repetition of '" + rules_[rep.item].name +
                                      "', which may match nothing, is not supported (rewrite (x?)* as x*)"});
  // Left edges: r -> s when s can be the first thing r expands to. A cycle would make the
  // matcher's expansion loop forever, so it is rejected with the cycle spelled out.
  std::vector<std::vector<std::uint32_t>> left(n);
  for (std::uint32_t r = 0; r < n; ++r)
    for (const auto& alt : rules_[r].alts)
      for (const element& e : alt) {
        if (e.k == element::kind::bytes) break;
        if (e.k == element::kind::ref) {
          left[r].push_back(e.arg);
          if (!nullable[e.arg]) break;
        } else {
          const repetition& rep = repetitions_[e.arg];
          left[r].push_back(rep.item);
          if (rep.min > 0 && !nullable[rep.item]) break;
        }
      }
  std::vector<std::uint8_t> color(n, 0); // 0 new, 1 on the path, 2 done
  std::vector<std::uint32_t> path;
  std::vector<std::pair<std::uint32_t, std::size_t>> todo;
  for (std::uint32_t s = 0; s < n; ++s) {
    if (color[s]) continue;
    todo.push_back({s, 0});
    color[s] = 1;
    path.push_back(s);
    while (!todo.empty()) {
      auto& [r, i] = todo.back();
      if (i == left[r].size()) {
        color[r] = 2;
        path.pop_back();
        todo.pop_back();
        continue;
      }
      std::uint32_t next = left[r][i++];
      if (color[next] == 1) {
        std::string cycle;
        auto it = std::find(path.begin(), path.end(), next);
        for (; it != path.end(); ++it) cycle += rules_[*it].name + " -> ";
        cycle += rules_[next].name;
        return unexpected(error{"", "left recursion is not supported: " + cycle +
                                        " (rewrite it with repetition, e.g. x ::= y (\",\" y)*)"});
      }
      if (color[next] == 0) {
        color[next] = 1;
        path.push_back(next);
        todo.push_back({next, 0});
      }
    }
  }

  auto g = std::make_shared<grammar>();
  g->classes_ = classes_;
  g->repetitions_ = repetitions_;
  g->root_ = root;
  std::uint64_t h = 0x6b766c616e65ull;
  auto mix = [&h](std::uint64_t v) { h = mix64(h ^ v) + 0x9E3779B97F4A7C15ull; };
  for (const byte_class& c : classes_)
    for (std::uint64_t w : c.bits) mix(w);
  for (const repetition& rep : repetitions_) {
    mix(rep.item);
    mix((static_cast<std::uint64_t>(rep.min) << 32) | rep.max);
  }
  for (std::uint32_t r = 0; r < n; ++r) {
    grammar::rule out{rules_[r].name, static_cast<std::uint32_t>(g->alt_starts_.size()),
                      static_cast<std::uint32_t>(rules_[r].alts.size())};
    for (const auto& alt : rules_[r].alts) {
      g->alt_starts_.push_back(static_cast<std::uint32_t>(g->elements_.size()));
      for (const element& e : alt) {
        g->elements_.push_back(e);
        mix((static_cast<std::uint64_t>(e.k) << 32) | e.arg);
      }
      g->elements_.push_back({element::kind::end, r});
      mix(0xffffffffull);
    }
    g->rules_.push_back(std::move(out));
    mix(0xfffffffeull);
  }
  mix(root);
  g->fingerprint_ = h;
  return std::shared_ptr<const grammar>(std::move(g));
}

} // namespace kvlane::grammar
