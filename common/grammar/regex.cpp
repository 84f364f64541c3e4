#include "common/grammar/regex.hpp"

#include "common/grammar/utf8_ranges.hpp"

#include <cstdio>

namespace kvlane::grammar {

namespace {

std::string hex_escape(std::uint32_t cp) {
  char buf[16];
  std::snprintf(buf, sizeof buf, cp <= 0xFF ? "\\x%02X" : cp <= 0xFFFF ? "\\u%04X" : "\\U%08X", cp);
  return buf;
}

/// A code point inside a GBNF class.
std::string class_char(std::uint32_t cp) {
  if (cp < 0x20 || cp == '\\' || cp == ']' || cp == '[' || cp == '-' || cp == '^' || cp == '"' || cp > 0x7E)
    return hex_escape(cp);
  return std::string(1, static_cast<char>(cp));
}

class regex_parser {
public:
  regex_parser(std::string_view p, const std::string& where, const limits& lim) : p_(p), where_(where), lim_(lim) {}

  expected<std::string, error> run() {
    if (p_.empty() || p_.front() != '^' || p_.back() != '$' || p_.size() < 2 || p_[p_.size() - 2] == '\\')
      return fail("pattern must be anchored with ^ at the start and $ at the end (unanchored "
                  "patterns are not supported)");
    i_ = 1;
    end_ = p_.size() - 1;
    auto r = alternation(0);
    if (!r) return r;
    if (i_ != end_) return fail_at("unexpected ')'");
    return "(" + *r + ")";
  }

private:
  std::string_view p_;
  const std::string& where_;
  const limits& lim_;
  std::size_t i_ = 0, end_ = 0;

  unexpected<error> fail(std::string what) const { return unexpected(error{where_, std::move(what)}); }
  unexpected<error> fail_at(std::string what) const {
    return unexpected(error{where_, std::move(what) + " at offset " + std::to_string(i_) + " of the pattern"});
  }
  bool more() const { return i_ < end_; }
  char peek() const { return more() ? p_[i_] : '\0'; }

  expected<std::string, error> alternation(std::uint32_t depth) {
    if (depth > lim_.max_nesting) return fail("pattern groups nested too deeply");
    std::string out;
    for (;;) {
      auto s = sequence(depth);
      if (!s) return s;
      out += s->empty() ? "\"\"" : *s;
      if (peek() != '|') return out;
      ++i_;
      out += " | ";
    }
  }

  expected<std::string, error> sequence(std::uint32_t depth) {
    std::string out;
    while (more() && peek() != '|' && peek() != ')') {
      auto a = atom(depth);
      if (!a) return a;
      auto q = quantifier();
      if (!q) return q;
      if (!out.empty()) out += ' ';
      out += *a + *q;
    }
    return out;
  }

  expected<std::string, error> quantifier() {
    if (!more()) return std::string{};
    char c = peek();
    std::string q;
    if (c == '*' || c == '+' || c == '?') { ++i_; q = std::string(1, c); }
    else if (c == '{') {
      std::size_t close = p_.find('}', i_);
      if (close == std::string_view::npos || close >= end_) return fail_at("unterminated {m,n}");
      std::string_view body = p_.substr(i_ + 1, close - i_ - 1);
      for (char ch : body)
        if (!(ch >= '0' && ch <= '9') && ch != ',') return fail_at("malformed {m,n}");
      if (body.empty() || body.front() == ',') return fail_at("malformed {m,n}");
      std::size_t comma = body.find(',');
      auto num = [&](std::string_view s) { std::uint64_t v = 0; for (char ch : s) v = std::min<std::uint64_t>(v * 10 + static_cast<std::uint64_t>(ch - '0'), 1ull << 40); return v; };
      std::uint64_t lo = num(body.substr(0, comma));
      std::uint64_t hi = comma == std::string_view::npos ? lo : comma + 1 == body.size() ? lo : num(body.substr(comma + 1));
      if (lo > lim_.max_repetition || hi > lim_.max_repetition) return fail_at("repetition bound exceeds the limit " + std::to_string(lim_.max_repetition));
      if (comma != std::string_view::npos && comma + 1 < body.size() && hi < lo) return fail_at("repetition {m,n} with n < m");
      q = "{" + std::string{body} + "}";
      i_ = close + 1;
    } else {
      return std::string{};
    }
    if (more() && (peek() == '?' || peek() == '+')) return fail_at("lazy and possessive quantifiers are not supported");
    return q;
  }

  expected<std::string, error> atom(std::uint32_t depth) {
    char c = peek();
    if (c == '(') {
      ++i_;
      if (peek() == '?') {
        if (i_ + 1 < end_ && p_[i_ + 1] == ':') i_ += 2;
        else return fail_at("lookaround and named groups are not supported");
      }
      auto r = alternation(depth + 1);
      if (!r) return r;
      if (peek() != ')') return fail_at("unclosed '('");
      ++i_;
      return "(" + *r + ")";
    }
    if (c == '[') return char_class();
    if (c == '.') { ++i_; return std::string{"[^\"\\\\\\x00-\\x1F]"}; }
    if (c == '^' || c == '$') return fail_at("anchors inside the pattern are not supported");
    if (c == '*' || c == '+' || c == '?' || c == '{') return fail_at("quantifier without an operand");
    if (c == '\\') {
      ++i_;
      if (!more()) return fail_at("pattern ends in a backslash");
      char e = p_[i_++];
      switch (e) {
        case 'd': return std::string{"[0-9]"};
        case 'D': return std::string{"[^0-9\"\\\\\\x00-\\x1F]"};
        case 'w': return std::string{"[a-zA-Z0-9_]"};
        case 'W': return std::string{"[^a-zA-Z0-9_\"\\\\\\x00-\\x1F]"};
        case 's': return std::string{"\" \""};
        case 'S': return std::string{"[^ \\t\\n\\r\"\\\\\\x00-\\x1F]"};
        default: break;
      }
      auto cp = escape_char(e);
      if (!cp) return unexpected(cp.error());
      return literal(*cp);
    }
    std::int32_t cp = next_code_point(p_, i_);
    if (cp < 0) return fail_at("invalid UTF-8 in the pattern");
    return literal(static_cast<std::uint32_t>(cp));
  }

  expected<std::uint32_t, error> escape_char(char e) {
    switch (e) {
      case 'n': case 'r': case 't': case 'f': case 'v':
        return fail_at("control characters in a pattern are not supported (they need JSON escapes)");
      case 'b': case 'B': return fail_at("word boundaries are not supported");
      case 'p': case 'P': return fail_at("Unicode property classes are not supported");
      case 'u': {
        std::uint32_t v = 0;
        for (int k = 0; k < 4; ++k) {
          char h = peek();
          int d = h >= '0' && h <= '9' ? h - '0' : h >= 'a' && h <= 'f' ? h - 'a' + 10 : h >= 'A' && h <= 'F' ? h - 'A' + 10 : -1;
          if (d < 0) return fail_at("\\u needs 4 hex digits");
          v = v * 16 + static_cast<std::uint32_t>(d);
          ++i_;
        }
        if (v < 0x20 || (v >= 0xD800 && v <= 0xDFFF)) return fail_at("\\u escape of a control or surrogate is not supported");
        return v;
      }
      default:
        if (e >= '1' && e <= '9') return fail_at("backreferences are not supported");
        if ((e >= 'a' && e <= 'z') || (e >= 'A' && e <= 'Z') || (e >= '0' && e <= '9'))
          return fail_at(std::string{"unsupported escape \\"} + e);
        return static_cast<std::uint32_t>(static_cast<unsigned char>(e));
    }
  }

  /// A character of the decoded string, spelled as JSON content (escaped where JSON must).
  expected<std::string, error> literal(std::uint32_t cp) {
    if (cp < 0x20) return fail_at("control characters in a pattern are not supported");
    if (cp == '"') return std::string{"\"\\\\\\\"\""};   // the two bytes \"
    if (cp == '\\') return std::string{"\"\\\\\\\\\""}; // the two bytes \\ (JSON)
    std::string s;
    append_utf8(s, cp);
    return gbnf_literal(s);
  }

  expected<std::string, error> char_class() {
    ++i_; // [
    bool negated = peek() == '^';
    if (negated) ++i_;
    std::string body;
    bool first = true;
    while (more() && (peek() != ']' || first)) {
      first = false;
      if (peek() == '\\') {
        ++i_;
        if (!more()) return fail_at("pattern ends in a backslash");
        char e = p_[i_++];
        if (e == 'd') { body += "0-9"; continue; }
        if (e == 'w') { body += "a-zA-Z0-9_"; continue; }
        if (e == 's') { body += negated ? " \\t\\n\\r" : " "; continue; }
        if (e == 'D' || e == 'W' || e == 'S') return fail_at("negated shorthand classes inside [] are not supported");
        auto cp = escape_char(e);
        if (!cp) return unexpected(cp.error());
        if (auto r = class_item(*cp, body, negated); !r) return unexpected(r.error());
        continue;
      }
      std::int32_t cp = next_code_point(p_, i_);
      if (cp < 0) return fail_at("invalid UTF-8 in the pattern");
      if (auto r = class_item(static_cast<std::uint32_t>(cp), body, negated); !r) return unexpected(r.error());
    }
    if (!more()) return fail_at("unterminated character class");
    ++i_; // ]
    if (negated) return "[^" + body + "\"\\\\\\x00-\\x1F]";
    if (body.empty()) return fail_at("the class matches no character a JSON string can hold unescaped");
    return "[" + body + "]";
  }

  /// One class member or range; a positive class drops '"', '\\' and controls (they would need
  /// escapes in the output).
  expected<void, error> class_item(std::uint32_t lo, std::string& body, bool negated) {
    std::uint32_t hi = lo;
    if (peek() == '-' && i_ + 1 < end_ && p_[i_ + 1] != ']') {
      ++i_;
      if (peek() == '\\') {
        ++i_;
        auto cp = escape_char(more() ? p_[i_++] : '\0');
        if (!cp) return unexpected(cp.error());
        hi = *cp;
      } else {
        std::int32_t cp = next_code_point(p_, i_);
        if (cp < 0) return fail_at("invalid UTF-8 in the pattern");
        hi = static_cast<std::uint32_t>(cp);
      }
      if (hi < lo) return fail_at("class range is reversed");
    }
    auto add = [&](std::uint32_t a, std::uint32_t b) {
      if (a > b) return;
      body += class_char(a);
      if (b > a) body += "-" + class_char(b);
    };
    if (negated) { add(lo, hi); return {}; }
    // Positive: [lo, hi] minus {controls, '"', '\\'}.
    std::uint32_t a = std::max<std::uint32_t>(lo, 0x20);
    for (std::uint32_t cut : {std::uint32_t{'"'}, std::uint32_t{'\\'}}) {
      if (a <= cut && cut <= hi) { add(a, cut - 1); a = cut + 1; }
    }
    add(a, hi);
    return {};
  }
};

} // namespace

std::string gbnf_literal(std::string_view text) {
  std::string out = "\"";
  for (unsigned char c : text) {
    if (c == '"') out += "\\\"";
    else if (c == '\\') out += "\\\\";
    else if (c < 0x20 || c == 0x7F) out += hex_escape(c);
    else out += static_cast<char>(c);
  }
  return out + "\"";
}

expected<std::string, error> regex_to_gbnf(std::string_view pattern, const std::string& where, const limits& lim) {
  return regex_parser{pattern, where, lim}.run();
}

} // namespace kvlane::grammar
