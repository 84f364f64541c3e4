#pragma once

// kvlane::grammar::grammar — a compiled context-free grammar over bytes.
//
// Problem it solves: structured output (JSON Schema, GBNF) must be enforced on the bytes a model
// produces, one token at a time. Every front end (compile_gbnf, compile_json_schema) lowers to
// this one form, which the matcher runs as a pushdown automaton: a rule is a list of
// alternatives, an alternative a sequence of elements ending in `end`, an element a byte class
// (a 256-bit set), a reference to a rule, or a counted repetition of a rule (x{m,n}: one element
// whose stack frame counts the items matched, instead of n expanded copies). Unicode classes are
// lowered to UTF-8 byte sequences at compile time, so the matcher never decodes UTF-8.
//
// Invariants established by the compiler (grammar_builder::finish) and relied on by the matcher:
// every reference names a defined rule, no rule reaches itself through nullable prefixes (no left
// recursion, so expanding a stack always terminates), and the sizes stay under `limits`.
//
// Ownership and threading: immutable once built; shared as std::shared_ptr<const grammar> by
// every matcher and mask cache that uses it; safe to read from any thread.

#include "common/expected.hpp"

#include <algorithm>
#include <array>
#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace kvlane::grammar {

/// A compile or restore failure. `where` is "line:column" for GBNF text, a JSON pointer for a
/// schema, empty when the grammar as a whole is at fault; `what` says what is wrong.
struct error {
  std::string where;
  std::string what;
  std::string message() const { return where.empty() ? what : where + ": " + what; }
};

/// Bounds that keep a hostile grammar or schema from exhausting memory or time.
struct limits {
  std::uint32_t max_rules = 1u << 16;
  std::uint32_t max_elements = 1u << 20;  ///< of all rules (a counted repetition is one)
  std::uint32_t max_nesting = 64;         ///< parentheses / schema depth
  std::uint32_t max_repetition = 10'000;  ///< the largest m or n in {m,n}
  std::size_t max_text = 1u << 20;        ///< bytes of GBNF text or schema JSON
};

struct byte_class {
  std::array<std::uint64_t, 4> bits{};
  bool has(std::uint8_t b) const noexcept { return (bits[b >> 6] >> (b & 63)) & 1u; }
  void add(std::uint8_t b) noexcept { bits[b >> 6] |= std::uint64_t{1} << (b & 63); }
  void add_range(std::uint8_t lo, std::uint8_t hi) noexcept {
    for (unsigned b = lo; b <= hi; ++b) add(static_cast<std::uint8_t>(b));
  }
  friend bool operator==(const byte_class&, const byte_class&) = default;
};

struct element {
  enum class kind : std::uint8_t { bytes, ref, end, repeat };
  kind k = kind::end;
  /// bytes: index into classes(); ref: rule index; end: the rule; repeat: index into repetitions()
  std::uint32_t arg = 0;
};

/// `item`{min,max}: the rule `item` matched between min and max times (max >= 1, or unbounded
/// for x*, x+, x{m,}); the matcher keeps the count in the repetition's stack frame.
struct repetition {
  static constexpr std::uint32_t unbounded = ~0u;
  std::uint32_t item = 0;
  std::uint32_t min = 0;
  std::uint32_t max = 1;
  /// The count once one more item ends, from `count`. Without an upper bound only "at least
  /// min" matters, so the count stops there (at 1 for min 0), which keeps the states of x*
  /// finite.
  std::uint32_t after(std::uint32_t count) const noexcept {
    return max != unbounded ? count + 1 : std::min(count + 1, std::max(min, 1u));
  }
};

class grammar {
public:
  std::span<const element> elements() const noexcept { return elements_; }
  const repetition& rep(std::uint32_t i) const noexcept { return repetitions_[i]; }
  std::size_t repetition_count() const noexcept { return repetitions_.size(); }
  const byte_class& cls(std::uint32_t i) const noexcept { return classes_[i]; }
  std::size_t class_count() const noexcept { return classes_.size(); }
  std::uint32_t rule_count() const noexcept { return static_cast<std::uint32_t>(rules_.size()); }
  /// Element indices where each alternative of `rule` starts.
  std::span<const std::uint32_t> alternatives(std::uint32_t rule) const noexcept {
    return {alt_starts_.data() + rules_[rule].first_alt, rules_[rule].alt_count};
  }
  std::string_view rule_name(std::uint32_t rule) const noexcept { return rules_[rule].name; }
  std::uint32_t root() const noexcept { return root_; }
  /// A hash of the structure: a saved matcher state only restores into an equal grammar.
  std::uint64_t fingerprint() const noexcept { return fingerprint_; }
  /// The grammar in GBNF form (byte classes spelled with \x escapes), for logs and tests.
  std::string to_gbnf() const;

private:
  friend class grammar_builder;
  struct rule {
    std::string name;
    std::uint32_t first_alt = 0;
    std::uint32_t alt_count = 0;
  };
  std::vector<element> elements_;
  std::vector<repetition> repetitions_;
  std::vector<byte_class> classes_;
  std::vector<rule> rules_;
  std::vector<std::uint32_t> alt_starts_;
  std::uint32_t root_ = 0;
  std::uint64_t fingerprint_ = 0;
};

/// Assembles a grammar rule by rule; used by the front ends. Rules are declared (by name, which
/// gives an index usable in references before the rule is defined) and then defined once.
class grammar_builder {
public:
  explicit grammar_builder(limits lim = {}) : lim_(lim) {}

  /// Index of the rule called `name`, declaring it if new.
  expected<std::uint32_t, error> declare(std::string_view name);
  /// A fresh rule named after `base` (base_1, base_2, ...).
  expected<std::uint32_t, error> fresh(std::string_view base);
  /// One alternative: a sequence of elements (kind::bytes args are class indices from
  /// add_class, kind::ref args rule indices). Appends to the rule's alternatives.
  expected<void, error> add_alternative(std::uint32_t rule, std::span<const element> seq);
  std::uint32_t add_class(const byte_class& c);
  /// The element for `item`{min,max} (1 <= max, min <= max <= limits.max_repetition).
  element add_repetition(std::uint32_t item, std::uint32_t min, std::uint32_t max);
  bool defined(std::uint32_t rule) const noexcept { return defined_[rule]; }
  std::string_view name(std::uint32_t rule) const noexcept { return rules_[rule].name; }
  /// `where_of(rule)`: where an undefined rule was first referenced (for the error).
  void note_reference(std::uint32_t rule, std::string where);
  /// Checks references, left recursion and limits; `root` names the start rule.
  expected<std::shared_ptr<const grammar>, error> finish(std::string_view root);

  const limits& lim() const noexcept { return lim_; }

private:
  struct pending_rule {
    std::string name;
    std::vector<std::vector<element>> alts;
  };
  limits lim_;
  std::vector<pending_rule> rules_;
  std::vector<bool> defined_;
  std::vector<std::string> first_ref_;
  std::vector<byte_class> classes_;
  std::vector<repetition> repetitions_;
  std::map<std::array<std::uint64_t, 4>, std::uint32_t> class_index_;
  std::unordered_map<std::string, std::uint32_t> rule_index_;
  std::size_t element_count_ = 0;
};

} // namespace kvlane::grammar
