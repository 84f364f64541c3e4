#include "common/grammar/gbnf.hpp"

#include "common/grammar/utf8_ranges.hpp"

#include <algorithm>
#include <unordered_map>

namespace kvlane::grammar {

namespace {

using seq_t = std::vector<element>;
constexpr std::uint32_t unbounded = ~0u;

class parser {
public:
  parser(std::string_view text, const limits& lim) : text_(text), b_(lim) {}

  expected<std::shared_ptr<const grammar>, error> run() {
    if (text_.size() > b_.lim().max_text)
      return fail("the grammar text is longer than " + std::to_string(b_.lim().max_text) + " bytes");
    skip_space(true);
    if (at_end()) return fail("the grammar is empty (expected at least `root ::= ...`)");
    while (!at_end()) {
      if (auto r = parse_rule(); !r) return unexpected(r.error());
      skip_space(true);
    }
    return b_.finish("root");
  }

private:
  std::string_view text_;
  std::size_t i_ = 0;
  grammar_builder b_;
  /// The rule item ::= [class] per byte class repeated, shared by every repetition of that class
  /// (so [a-z]{0,5} and [a-z]{2,9} have one item, and the mask cache one entry for both).
  std::unordered_map<std::uint32_t, std::uint32_t> item_of_class_;

  bool at_end() const { return i_ >= text_.size(); }
  char peek(std::size_t k = 0) const { return i_ + k < text_.size() ? text_[i_ + k] : '\0'; }

  /// "line:column" of byte `at`. Positions are asked for mostly in increasing order (every first
  /// reference of a rule), so the scan resumes from the last answer: linear in the text overall.
  std::string where(std::size_t at) const {
    if (at < where_at_) { where_at_ = 0; where_line_ = 1; where_col_ = 1; }
    for (; where_at_ < at && where_at_ < text_.size(); ++where_at_) {
      const char c = text_[where_at_];
      if (c == '\n') { ++where_line_; where_col_ = 1; }
      else if ((static_cast<unsigned char>(c) & 0xC0) != 0x80) ++where_col_;
    }
    return std::to_string(where_line_) + ":" + std::to_string(where_col_);
  }
  mutable std::size_t where_at_ = 0, where_line_ = 1, where_col_ = 1;
  unexpected<error> fail(std::string what) const { return fail_at(i_, std::move(what)); }
  unexpected<error> fail_at(std::size_t at, std::string what) const {
    return unexpected(error{where(at), std::move(what)});
  }

  /// Skips blanks and comments; newlines too when `newlines`.
  void skip_space(bool newlines) {
    while (!at_end()) {
      char c = peek();
      if (c == ' ' || c == '\t' || c == '\r') ++i_;
      else if (c == '\n' && newlines) ++i_;
      else if (c == '#') { while (!at_end() && peek() != '\n') ++i_; }
      else if (c == '\\' && peek(1) == '\n') i_ += 2; // an escaped line break continues the body
      else break;
    }
  }

  static bool name_char(char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' || c == '_';
  }

  std::string_view parse_name() {
    std::size_t s = i_;
    while (!at_end() && name_char(peek())) ++i_;
    return text_.substr(s, i_ - s);
  }

  expected<void, error> parse_rule() {
    std::size_t at = i_;
    std::string_view name = parse_name();
    if (name.empty()) return fail("expected a rule name, found " + describe());
    skip_space(false);
    if (text_.substr(i_, 3) != "::=") return fail("expected '::=' after rule name '" + std::string{name} + "', found " + describe());
    i_ += 3;
    auto id = b_.declare(name);
    if (!id) return fail_at(at, id.error().what);
    if (b_.defined(*id)) return fail_at(at, "rule '" + std::string{name} + "' is defined twice");
    skip_space(true); // as llama.cpp: the body may start on the next line
    if (auto r = parse_alternatives(*id, 0); !r) return r;
    skip_space(false);
    if (!at_end() && peek() != '\n') return fail("expected the end of the line after the rule body, found " + describe());
    return {};
  }

  std::string describe() const {
    if (at_end()) return "the end of the text";
    if (peek() == '\n') return "the end of the line";
    std::size_t k = i_;
    std::int32_t cp = next_code_point(text_, k);
    if (cp < 0) return "an invalid UTF-8 byte";
    return "'" + std::string{text_.substr(i_, k - i_)} + "'";
  }

  expected<void, error> parse_alternatives(std::uint32_t rule, std::uint32_t depth) {
    if (depth > b_.lim().max_nesting)
      return fail("groups nested deeper than " + std::to_string(b_.lim().max_nesting));
    for (;;) {
      seq_t seq;
      if (auto r = parse_sequence(seq, depth); !r) return r;
      if (auto r = b_.add_alternative(rule, seq); !r) return fail(r.error().what);
      skip_space(depth > 0);
      if (peek() != '|') return {};
      ++i_;
      skip_space(true);
    }
  }

  expected<void, error> parse_sequence(seq_t& seq, std::uint32_t depth) {
    for (;;) {
      skip_space(depth > 0);
      if (at_end()) return {};
      char c = peek();
      std::size_t item_start = seq.size();
      std::size_t at = i_;
      if (c == '|' || c == '\n') return {};
      if (c == ')') {
        if (depth == 0) return fail("unbalanced ')'");
        return {};
      }
      if (c == '"') {
        ++i_;
        std::string bytes;
        for (;;) {
          if (at_end() || peek() == '\n') return fail_at(at, "unterminated string literal");
          if (peek() == '"') { ++i_; break; }
          auto cp = parse_char();
          if (!cp) return unexpected(cp.error());
          append_utf8(bytes, *cp);
        }
        for (char ch : bytes) {
          byte_class bc;
          bc.add(static_cast<std::uint8_t>(ch));
          seq.push_back({element::kind::bytes, b_.add_class(bc)});
        }
        if (bytes.empty()) continue; // "" is the empty sequence; a repetition of it is too
      } else if (c == '[') {
        ++i_;
        bool negated = peek() == '^';
        if (negated) ++i_;
        std::vector<std::pair<std::uint32_t, std::uint32_t>> ranges;
        for (;;) {
          if (at_end() || peek() == '\n') return fail_at(at, "unterminated character class");
          if (peek() == ']') { ++i_; break; }
          auto lo = parse_char();
          if (!lo) return unexpected(lo.error());
          std::uint32_t hi = *lo;
          if (peek() == '-' && peek(1) != ']' && peek(1) != '\0') {
            ++i_;
            std::size_t hi_at = i_;
            auto h = parse_char();
            if (!h) return unexpected(h.error());
            if (*h < *lo) return fail_at(hi_at, "class range is reversed");
            hi = *h;
          }
          ranges.push_back({*lo, hi});
        }
        if (auto r = lower_class(ranges, negated, seq); !r) return fail_at(at, r.error().what);
      } else if (c == '.') {
        ++i_;
        if (auto r = lower_class({{0, max_code_point}}, false, seq); !r) return fail_at(at, r.error().what);
      } else if (c == '(') {
        ++i_;
        auto group = b_.fresh("group");
        if (!group) return fail(group.error().what);
        skip_space(true);
        if (auto r = parse_alternatives(*group, depth + 1); !r) return r;
        skip_space(true);
        if (peek() != ')') return fail_at(at, "unclosed '(': expected ')' before " + describe());
        ++i_;
        seq.push_back({element::kind::ref, *group});
      } else if (name_char(c)) {
        std::string_view name = parse_name();
        auto id = b_.declare(name);
        if (!id) return fail_at(at, id.error().what);
        b_.note_reference(*id, where(at));
        seq.push_back({element::kind::ref, *id});
      } else {
        return fail("unexpected " + describe());
      }
      if (auto r = parse_postfix(seq, item_start); !r) return r;
    }
  }

  expected<void, error> parse_postfix(seq_t& seq, std::size_t item_start) {
    for (;;) {
      char c = peek();
      std::uint32_t lo = 0, hi = 0;
      std::size_t at = i_;
      if (c == '*') { lo = 0; hi = unbounded; ++i_; }
      else if (c == '+') { lo = 1; hi = unbounded; ++i_; }
      else if (c == '?') { lo = 0; hi = 1; ++i_; }
      else if (c == '{') {
        ++i_;
        auto m = parse_int();
        if (!m) return unexpected(m.error());
        lo = hi = *m;
        skip_space(false);
        if (peek() == ',') {
          ++i_;
          skip_space(false);
          if (peek() == '}') hi = unbounded;
          else {
            auto n = parse_int();
            if (!n) return unexpected(n.error());
            hi = *n;
          }
        }
        skip_space(false);
        if (peek() != '}') return fail("expected '}' to close the repetition, found " + describe());
        ++i_;
        if (hi != unbounded && hi < lo) return fail_at(at, "repetition {m,n} with n < m");
      } else {
        return {};
      }
      if (auto r = repeat(seq, item_start, lo, hi); !r) return fail_at(at, r.error().what);
    }
  }

  expected<std::uint32_t, error> parse_int() {
    skip_space(false);
    std::size_t s = i_;
    std::uint64_t v = 0;
    while (peek() >= '0' && peek() <= '9') {
      v = v * 10 + static_cast<std::uint64_t>(peek() - '0');
      if (v > b_.lim().max_repetition)
        return fail_at(s, "repetition bound exceeds the limit " + std::to_string(b_.lim().max_repetition));
      ++i_;
    }
    if (i_ == s) return fail("expected a number in the repetition, found " + describe());
    return static_cast<std::uint32_t>(v);
  }

  /// One character of a literal or class, escapes resolved, as a code point.
  expected<std::uint32_t, error> parse_char() {
    std::size_t at = i_;
    if (peek() != '\\') {
      std::int32_t cp = next_code_point(text_, i_);
      if (cp < 0) return fail_at(at, "invalid UTF-8 in the grammar text");
      return static_cast<std::uint32_t>(cp);
    }
    ++i_;
    char e = peek();
    ++i_;
    switch (e) {
      case 'n': return 0x0Au;
      case 'r': return 0x0Du;
      case 't': return 0x09u;
      case '\\': case '"': case '\'': case '[': case ']': case '-': case '^': case '/': case '.':
        return static_cast<std::uint32_t>(static_cast<unsigned char>(e));
      case 'x': return parse_hex(2, at);
      case 'u': return parse_hex(4, at);
      case 'U': return parse_hex(8, at);
      default:
        return fail_at(at, "unknown escape '\\" + std::string(1, e) + "'");
    }
  }

  expected<std::uint32_t, error> parse_hex(int digits, std::size_t at) {
    std::uint32_t v = 0;
    for (int k = 0; k < digits; ++k) {
      char c = peek();
      int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
      if (d < 0) return fail_at(at, "escape needs " + std::to_string(digits) + " hex digits");
      v = v * 16 + static_cast<std::uint32_t>(d);
      ++i_;
    }
    if (v > max_code_point || (v >= 0xD800 && v <= 0xDFFF))
      return fail_at(at, "escape is not a Unicode scalar value");
    return v;
  }

  /// A class of code points as one byte-class element (all ASCII) or a rule of UTF-8 sequences.
  expected<void, error> lower_class(std::vector<std::pair<std::uint32_t, std::uint32_t>> ranges, bool negated,
                                    seq_t& seq) {
    std::sort(ranges.begin(), ranges.end());
    std::vector<std::pair<std::uint32_t, std::uint32_t>> merged;
    for (auto r : ranges) {
      if (!merged.empty() && r.first <= merged.back().second + 1) merged.back().second = std::max(merged.back().second, r.second);
      else merged.push_back(r);
    }
    if (negated) {
      std::vector<std::pair<std::uint32_t, std::uint32_t>> comp;
      std::uint32_t next = 0;
      for (auto r : merged) {
        if (r.first > next) comp.push_back({next, r.first - 1});
        next = r.second + 1;
      }
      if (next <= max_code_point) comp.push_back({next, max_code_point});
      merged = std::move(comp);
    }
    byte_class single;
    bool any_single = false;
    std::vector<byte_range_seq> multi;
    for (auto r : merged)
      for (auto& s : utf8_sequences(r.first, r.second)) {
        if (s.size() == 1) { single.add_range(s[0].lo, s[0].hi); any_single = true; }
        else multi.push_back(std::move(s));
      }
    if (multi.empty()) {
      seq.push_back({element::kind::bytes, b_.add_class(single)});
      return {};
    }
    auto rule = b_.fresh("char");
    if (!rule) return unexpected(rule.error());
    if (any_single) {
      element e{element::kind::bytes, b_.add_class(single)};
      if (auto r = b_.add_alternative(*rule, {&e, 1}); !r) return r;
    }
    for (const auto& s : multi) {
      seq_t alt;
      for (auto br : s) {
        byte_class bc;
        bc.add_range(br.lo, br.hi);
        alt.push_back({element::kind::bytes, b_.add_class(bc)});
      }
      if (auto r = b_.add_alternative(*rule, alt); !r) return r;
    }
    seq.push_back({element::kind::ref, *rule});
    return {};
  }

  /// Replaces seq[item_start..] by its repetition {lo,hi}.
  expected<void, error> repeat(seq_t& seq, std::size_t item_start, std::uint32_t lo, std::uint32_t hi) {
    if (item_start == seq.size()) return {}; // repeating the empty sequence
    element item;
    if (seq.size() - item_start == 1) {
      item = seq.back();
    } else {
      auto wrap = b_.fresh("lit");
      if (!wrap) return unexpected(wrap.error());
      seq_t body(seq.begin() + static_cast<std::ptrdiff_t>(item_start), seq.end());
      if (auto r = b_.add_alternative(*wrap, body); !r) return r;
      item = {element::kind::ref, *wrap};
    }
    seq.resize(item_start);
    if (hi >= 2) {
      // Counted: one element whose frame holds the count, so x{0,100} is one grammar position
      // (the matcher's states inside it differ only by the count, which the mask cache ignores
      // but for the tokens' lengths), and x*, x+ the same element without an upper bound.
      std::uint32_t rule = item.arg;
      if (item.k == element::kind::bytes) {
        if (auto it = item_of_class_.find(item.arg); it != item_of_class_.end()) {
          rule = it->second;
        } else {
          auto wrap = b_.fresh("item");
          if (!wrap) return unexpected(wrap.error());
          if (auto r = b_.add_alternative(*wrap, {&item, 1}); !r) return r;
          rule = item_of_class_[item.arg] = *wrap;
        }
      } else if (item.k != element::kind::ref) { // a repetition repeated
        auto wrap = b_.fresh("item");
        if (!wrap) return unexpected(wrap.error());
        if (auto r = b_.add_alternative(*wrap, {&item, 1}); !r) return r;
        rule = *wrap;
      }
      seq.push_back(b_.add_repetition(rule, lo, hi == unbounded ? repetition::unbounded : hi));
      return {};
    }
    if (static_cast<std::uint64_t>(lo) + seq.size() > b_.lim().max_elements)
      return unexpected(error{"", "the grammar expands to more than " + std::to_string(b_.lim().max_elements) + " elements"});
    for (std::uint32_t k = 0; k < lo; ++k) seq.push_back(item);
    if (lo == 0 && hi == 1) { // x? as a rule: opt ::= x | ""
      auto opt = b_.fresh("opt");
      if (!opt) return unexpected(opt.error());
      if (auto r = b_.add_alternative(*opt, {&item, 1}); !r) return r;
      if (auto r = b_.add_alternative(*opt, {}); !r) return r;
      seq.push_back({element::kind::ref, *opt});
    }
    return {};
  }
};

} // namespace

expected<std::shared_ptr<const grammar>, error> compile_gbnf(std::string_view text, const limits& lim) {
  return parser{text, lim}.run();
}

} // namespace kvlane::grammar
