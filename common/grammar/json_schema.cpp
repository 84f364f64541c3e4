#include "common/grammar/json_schema.hpp"

#include "common/grammar/gbnf.hpp"
#include "common/grammar/regex.hpp"
#include "common/grammar/schema_overlap.hpp"
#include "common/grammar/utf8_ranges.hpp"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <optional>
#include <set>

namespace kvlane::grammar {

namespace {

using json = nlohmann::ordered_json;

// A number's exponent has at most 2 digits, so every number fits a double (a 3-digit exponent
// reached 1e999, which clients read as Infinity or refuse).
constexpr const char* base_rules = R"(json-char ::= [^"\\\x00-\x1F] | "\\" (["\\/bfnrt] | "u" [0-9a-fA-F]{4})
json-string ::= "\"" json-char* "\""
json-int ::= "-"? ("0" | [1-9] [0-9]{0,18})
json-number ::= "-"? json-unsigned
json-unsigned ::= ("0" | [1-9] [0-9]{0,15}) ("." [0-9]{1,15})? ([eE] [-+]? [0-9]{1,2})?
json-bool ::= "true" | "false"
json-null ::= "null"
date ::= [0-9]{4} "-" ("0" [1-9] | "1" [0-2]) "-" ("0" [1-9] | [12] [0-9] | "3" [01])
time ::= ([01] [0-9] | "2" [0-3]) ":" [0-5] [0-9] ":" [0-5] [0-9] ("." [0-9]{1,9})? ("Z" | [+-] ([01] [0-9] | "2" [0-3]) ":" [0-5] [0-9])
uuid ::= [0-9a-fA-F]{8} "-" [0-9a-fA-F]{4} "-" [0-9a-fA-F]{4} "-" [0-9a-fA-F]{4} "-" [0-9a-fA-F]{12}
)";

const std::set<std::string, std::less<>> annotations = {
    "$schema", "$id", "$comment", "title", "description", "examples", "default", "deprecated",
    "readOnly", "writeOnly", "$defs", "definitions"};
const std::set<std::string, std::less<>> supported = {
    "type", "properties", "required", "additionalProperties", "enum", "const", "items", "minItems",
    "maxItems", "anyOf", "oneOf", "$ref", "minLength", "maxLength", "pattern", "minimum", "maximum",
    "exclusiveMinimum", "exclusiveMaximum", "format"};

/// Whether `propertyNames` holds for every key: true, {} or {"type":"string"} (annotations
/// aside), as zod writes it for z.record(z.string(), ...). Any other stays unsupported.
bool admits_every_key(const json& v) {
  if (v.is_boolean()) return v.get<bool>();
  if (!v.is_object()) return false;
  for (auto it = v.begin(); it != v.end(); ++it)
    if (!annotations.count(it.key()) && !(it.key() == "type" && it.value() == "string")) return false;
  return true;
}

/// Nesting depth of a JSON value, without recursion (dump() recurses: a hostile `const` must be
/// refused before it is written).
std::size_t depth_of(const json& v) {
  std::size_t deepest = 0;
  std::vector<std::pair<const json*, std::size_t>> todo{{&v, 1}};
  while (!todo.empty()) {
    auto [j, d] = todo.back();
    todo.pop_back();
    deepest = std::max(deepest, d);
    if (j->is_structured())
      for (const auto& x : *j) todo.push_back({&x, d + 1});
  }
  return deepest;
}

std::string escape_pointer_token(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '~') out += "~0";
    else if (c == '/') out += "~1";
    else out += c;
  }
  return out;
}

std::string digits_range(const std::string& a, const std::string& b);

/// Same-length decimal strings a <= b: a GBNF expression for every string between them.
std::string digits_range(const std::string& a, const std::string& b) {
  if (a.size() == 1) return a == b ? "\"" + a + "\"" : "[" + a + "-" + b + "]";
  if (a[0] == b[0]) return "\"" + std::string(1, a[0]) + "\" " + digits_range(a.substr(1), b.substr(1));
  const std::string rest_a = a.substr(1), rest_b = b.substr(1);
  const std::string zeros(rest_a.size(), '0'), nines(rest_a.size(), '9');
  const std::string any = "[0-9]{" + std::to_string(rest_a.size()) + "}";
  if (rest_a == zeros && rest_b == nines)
    return "[" + std::string(1, a[0]) + "-" + std::string(1, b[0]) + "] " + any;
  std::string out = "(\"" + std::string(1, a[0]) + "\" " + digits_range(rest_a, nines);
  if (b[0] - a[0] > 1) {
    out += " | [" + std::string(1, static_cast<char>(a[0] + 1)) + "-" + std::string(1, static_cast<char>(b[0] - 1)) + "] " + any;
  }
  out += " | \"" + std::string(1, b[0]) + "\" " + digits_range(zeros, rest_b) + ")";
  return out;
}

constexpr std::int64_t max_magnitude = 999'999'999'999'999'999; // 18 digits: exact in int64

/// Non-negative integers in [lo, hi] (hi may be nullopt: unbounded, up to 19 digits).
std::string uint_range(std::int64_t lo, std::optional<std::int64_t> hi) {
  std::vector<std::string> alts;
  const std::string lo_s = std::to_string(lo);
  const std::size_t max_len = hi ? std::to_string(*hi).size() : 19;
  for (std::size_t len = lo_s.size(); len <= max_len; ++len) {
    if (!hi && len > lo_s.size()) {
      // Every longer number: a non-zero digit and len-1 more, up to 19 digits.
      alts.push_back("[1-9] [0-9]{" + std::to_string(len - 1) + "," + std::to_string(max_len - 1) + "}");
      break;
    }
    std::string a = len == lo_s.size() ? lo_s : "1" + std::string(len - 1, '0');
    std::string b = hi && len == std::to_string(*hi).size() ? std::to_string(*hi) : std::string(len, '9');
    if (len == 1 && a == "0") { alts.push_back(b == "0" ? "\"0\"" : "[0-" + b + "]"); continue; }
    alts.push_back(digits_range(a, b));
  }
  std::string out = "(";
  for (std::size_t k = 0; k < alts.size(); ++k) out += (k ? " | " : "") + alts[k];
  return out + ")";
}

class compiler {
public:
  compiler(const json& root, const json_schema_options& opt) : root_(root), opt_(opt) {}

  expected<std::string, error> run() {
    auto top = visit(root_, "", 0);
    if (!top) return unexpected(top.error());
    rules_ += "root ::= " + *top + "\n";
    return std::string{base_rules} + any_rules() + rules_;
  }

  std::string any_rules() {
    if (!need_any_) return {};
    std::string out;
    for (std::uint32_t d = 0; d <= opt_.max_any_depth; ++d) {
      const std::string s = std::to_string(d);
      std::string scalars = "json-string | json-number | json-bool | json-null";
      if (d == 0) {
        out += "any-value-0 ::= " + scalars + "\n";
        continue;
      }
      const std::string inner = "any-value-" + std::to_string(d - 1);
      out += "any-object-" + s + " ::= \"{\" (json-string \":\" " + inner + " (\",\" json-string \":\" " + inner + ")*)? \"}\"\n";
      out += "any-array-" + s + " ::= \"[\" (" + inner + " (\",\" " + inner + ")*)? \"]\"\n";
      out += "any-value-" + s + " ::= any-object-" + s + " | any-array-" + s + " | " + scalars + "\n";
    }
    return out;
  }

  std::string any_value() { need_any_ = true; return "any-value-" + std::to_string(opt_.max_any_depth); }
  std::string any_object() {
    need_any_ = true;
    return opt_.max_any_depth == 0 ? "\"{}\"" : "any-object-" + std::to_string(opt_.max_any_depth);
  }

private:
  const json& root_;
  const json_schema_options& opt_;
  std::string rules_;
  std::map<std::string, std::string> ref_rules_;
  std::uint32_t counter_ = 0;
  bool need_any_ = false;

  unexpected<error> fail(const std::string& ptr, std::string what) const {
    return unexpected(error{ptr.empty() ? "/" : ptr, std::move(what)});
  }

  /// `expr` as a rule name, so that text used more than once is not copied (nested copies
  /// would grow exponentially with the schema's depth).
  std::string as_rule(const std::string& expr) {
    const bool name = !expr.empty() && std::all_of(expr.begin(), expr.end(), [](char c) {
      return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-';
    });
    return name ? expr : new_rule(expr, "v");
  }

  std::string new_rule(const std::string& body, const std::string& base = "s") {
    std::string name = base + "-" + std::to_string(counter_++);
    rules_ += name + " ::= " + body + "\n";
    return name;
  }

  expected<std::string, error> visit(const json& s, const std::string& ptr, std::uint32_t depth) {
    if (depth > opt_.lim.max_nesting) return fail(ptr, "schema nested deeper than " + std::to_string(opt_.lim.max_nesting) + " levels");
    if (s.is_boolean()) {
      if (s.get<bool>()) return any_value();
      return fail(ptr, "schema 'false' admits no value");
    }
    if (!s.is_object()) return fail(ptr, "a schema must be an object or a boolean");
    for (auto it = s.begin(); it != s.end(); ++it) {
      if (annotations.count(it.key()) || supported.count(it.key())) continue;
      if (it.key() == "propertyNames" && admits_every_key(it.value())) continue; // no constraint
      return fail(ptr + "/" + escape_pointer_token(it.key()), "unsupported JSON Schema keyword '" + it.key() + "'");
    }
    auto constraint_keys = [&](std::initializer_list<const char*> except) {
      std::vector<std::string> out;
      for (auto it = s.begin(); it != s.end(); ++it) {
        if (annotations.count(it.key()) || (it.key() == "propertyNames" && admits_every_key(it.value()))) continue;
        bool skip = false;
        for (const char* e : except) skip = skip || it.key() == e;
        if (!skip) out.push_back(it.key());
      }
      return out;
    };

    if (s.contains("$ref")) {
      if (auto others = constraint_keys({"$ref"}); !others.empty())
        return fail(ptr + "/" + others[0], "'" + others[0] + "' beside '$ref' is not supported");
      return ref(s["$ref"], ptr + "/$ref", depth);
    }
    for (const char* key : {"const", "enum"})
      if (s.contains(key) && depth_of(s[key]) > opt_.lim.max_nesting)
        return fail(ptr + "/" + key, std::string{"'"} + key + "' value nested deeper than " + std::to_string(opt_.lim.max_nesting) + " levels");
    if (s.contains("const")) {
      if (auto others = constraint_keys({"const", "type"}); !others.empty())
        return fail(ptr + "/" + others[0], "'" + others[0] + "' beside 'const' is not supported");
      return gbnf_literal(s["const"].dump());
    }
    if (s.contains("enum")) {
      const json& e = s["enum"];
      if (!e.is_array() || e.empty()) return fail(ptr + "/enum", "'enum' must be a non-empty array");
      if (auto others = constraint_keys({"enum", "type"}); !others.empty())
        return fail(ptr + "/" + others[0], "'" + others[0] + "' beside 'enum' is not supported");
      std::string body;
      for (const auto& v : e) body += (body.empty() ? "" : " | ") + gbnf_literal(v.dump());
      return "(" + body + ")";
    }
    for (const char* key : {"anyOf", "oneOf"}) {
      if (!s.contains(key)) continue;
      const json& alts = s[key];
      const std::string p = ptr + "/" + key;
      if (!alts.is_array() || alts.empty()) return fail(p, std::string{"'"} + key + "' must be a non-empty array");
      if (auto others = constraint_keys({key}); !others.empty())
        return fail(ptr + "/" + others[0], "'" + others[0] + "' beside '" + key + "' is not supported");
      if (std::string_view{key} == "oneOf") {
        // Generated as a plain alternation, which is exact only when no value matches two
        // branches: required here, judged by the kinds of value each branch admits.
        const schema_overlap overlap{root_, opt_.lim.max_nesting};
        for (std::size_t i = 0; i < alts.size(); ++i)
          for (std::size_t j = i + 1; j < alts.size(); ++j)
            if (!overlap.disjoint(alts[i], alts[j]))
              return fail(p, "'oneOf' branches " + std::to_string(i) + " and " + std::to_string(j) +
                                 " may both match a value (oneOf is supported when its branches differ by type, by constant value or by a required property's constant value; use anyOf)");
      }
      std::string body;
      for (std::size_t k = 0; k < alts.size(); ++k) {
        auto sub = visit(alts[k], p + "/" + std::to_string(k), depth + 1);
        if (!sub) return sub;
        body += (k ? " | " : "") + *sub;
      }
      return "(" + body + ")";
    }

    // The types to generate: `type`, or what the keywords present imply, or any value.
    std::vector<std::string> types;
    if (s.contains("type")) {
      const json& t = s["type"];
      if (t.is_string()) types.push_back(t.get<std::string>());
      else if (t.is_array() && !t.empty()) {
        for (const auto& x : t) {
          if (!x.is_string()) return fail(ptr + "/type", "'type' must be a string or an array of strings");
          types.push_back(x.get<std::string>());
        }
      } else return fail(ptr + "/type", "'type' must be a string or an array of strings");
    } else {
      auto has = [&](std::initializer_list<const char*> keys) {
        for (const char* k : keys) if (s.contains(k)) return true;
        return false;
      };
      if (has({"properties", "required", "additionalProperties"})) types.push_back("object");
      if (has({"items", "minItems", "maxItems"})) types.push_back("array");
      if (has({"minLength", "maxLength", "pattern", "format"})) types.push_back("string");
      if (has({"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"})) types.push_back("number");
      if (types.empty()) return any_value();
    }
    std::string body;
    for (const auto& t : types) {
      expected<std::string, error> one = std::string{};
      if (t == "object") one = object(s, ptr, depth);
      else if (t == "array") one = array(s, ptr, depth);
      else if (t == "string") one = string(s, ptr);
      else if (t == "integer") one = integer(s, ptr);
      else if (t == "number") one = number(s, ptr);
      else if (t == "boolean") one = std::string{"json-bool"};
      else if (t == "null") one = std::string{"json-null"};
      else return fail(ptr + "/type", "unknown type '" + t + "'");
      if (!one) return one;
      body += (body.empty() ? "" : " | ") + *one;
    }
    return types.size() == 1 ? body : "(" + body + ")";
  }

  expected<std::string, error> ref(const json& r, const std::string& ptr, std::uint32_t depth) {
    if (!r.is_string()) return fail(ptr, "'$ref' must be a string");
    const std::string target = r.get<std::string>();
    if (target.empty() || target[0] != '#')
      return fail(ptr, "only local references (#/$defs/..., #/definitions/...) are supported, not '" + target + "'");
    if (auto it = ref_rules_.find(target); it != ref_rules_.end()) return it->second;
    const json* sub = nullptr;
    try {
      sub = &root_.at(json::json_pointer(target.substr(1)));
    } catch (const std::exception&) {
      return fail(ptr, "reference '" + target + "' does not resolve in this schema");
    }
    // Named before the body is compiled, so a recursive reference finds it.
    std::string name = "ref-" + std::to_string(counter_++);
    ref_rules_[target] = name;
    auto body = visit(*sub, target.substr(1), depth + 1);
    if (!body) return body;
    rules_ += name + " ::= " + *body + "\n";
    return name;
  }

  expected<std::optional<std::int64_t>, error> count(const json& s, const char* key, const std::string& ptr) {
    if (!s.contains(key)) return std::optional<std::int64_t>{};
    const json& v = s[key];
    if (!v.is_number_unsigned() && !(v.is_number_integer() && v.get<std::int64_t>() >= 0))
      return fail(ptr + "/" + key, std::string{"'"} + key + "' must be a non-negative integer");
    std::uint64_t n = v.get<std::uint64_t>();
    if (n > opt_.lim.max_repetition)
      return fail(ptr + "/" + key, std::string{"'"} + key + "' exceeds the limit " + std::to_string(opt_.lim.max_repetition));
    return std::optional<std::int64_t>{static_cast<std::int64_t>(n)};
  }

  expected<std::string, error> object(const json& s, const std::string& ptr, std::uint32_t depth) {
    const json empty = json::object();
    const json& props = s.contains("properties") ? s["properties"] : empty;
    if (!props.is_object()) return fail(ptr + "/properties", "'properties' must be an object");
    std::set<std::string> required;
    if (s.contains("required")) {
      const json& r = s["required"];
      if (!r.is_array()) return fail(ptr + "/required", "'required' must be an array of strings");
      for (std::size_t k = 0; k < r.size(); ++k) {
        if (!r[k].is_string()) return fail(ptr + "/required/" + std::to_string(k), "'required' must be an array of strings");
        if (!props.contains(r[k].get<std::string>()))
          return fail(ptr + "/required/" + std::to_string(k), "required property '" + r[k].get<std::string>() + "' is not listed in 'properties'");
        required.insert(r[k].get<std::string>());
      }
    }
    // additionalProperties: a GBNF value expression, or empty for none.
    std::string extra;
    if (s.contains("additionalProperties")) {
      const json& a = s["additionalProperties"];
      if (a.is_boolean()) {
        if (a.get<bool>()) extra = any_value();
      } else {
        auto v = visit(a, ptr + "/additionalProperties", depth + 1);
        if (!v) return v;
        extra = as_rule(*v);
      }
    } else if (props.empty()) {
      return any_object();
    }
    std::vector<std::pair<std::string, bool>> kvs; // (key ":" value, required)
    for (auto it = props.begin(); it != props.end(); ++it) {
      auto v = visit(it.value(), ptr + "/properties/" + escape_pointer_token(it.key()), depth + 1);
      if (!v) return v;
      kvs.push_back({as_rule(gbnf_literal(json(it.key()).dump() + ":") + " " + *v), required.count(it.key()) > 0});
    }
    const std::string extra_kv = extra.empty() ? "" : other_key(props) + " \":\" " + extra;
    // after_k: the rest once at least one property is out (each next one needs a comma);
    // first_k: the rest before any is out. Built from the last property back.
    std::string after = extra.empty() ? "\"\"" : new_rule("(\",\" " + extra_kv + ")*", "more");
    std::string first = extra.empty() ? "\"\"" : new_rule("(" + extra_kv + " " + after + ")?", "extra");
    for (std::size_t k = kvs.size(); k-- > 0;) {
      const auto& [kv, req] = kvs[k];
      std::string new_after = new_rule("\",\" " + kv + " " + after + (req ? "" : " | " + after), "after");
      std::string new_first = new_rule(kv + " " + after + (req ? "" : " | " + first), "first");
      after = new_after;
      first = new_first;
    }
    return "\"{\" " + first + " \"}\"";
  }

  /// A JSON string that is none of `props`' names (an additional property's key): the names'
  /// trie spelled as rules. While the key still follows a name, each character is taken raw
  /// or as a short escape (\" \\ \/ \b \f \n \r \t) and moves along the trie; any other
  /// character leaves it, and from there the key is any string. A \u escape is taken only off
  /// the trie (so no spelling of a listed name gets through), and the closing quote only where
  /// the characters so far are not a whole name.
  std::string other_key(const json& props) {
    if (props.empty()) return "json-string";
    struct trie_node {
      std::map<std::uint32_t, std::size_t> next; // code point -> node
      bool name = false;
    };
    std::vector<trie_node> trie(1);
    for (auto it = props.begin(); it != props.end(); ++it) {
      std::size_t at = 0;
      const std::string& key = it.key();
      for (std::size_t i = 0; i < key.size();) {
        const std::int32_t cp = next_code_point(key, i);
        if (cp < 0) break; // nlohmann rejects invalid UTF-8 in keys; never reached
        auto [slot, added] = trie[at].next.emplace(static_cast<std::uint32_t>(cp), trie.size());
        if (added) trie.emplace_back();
        at = slot->second;
      }
      trie[at].name = true;
    }
    auto code = [](std::uint32_t cp) {
      char buf[16];
      if ((cp >= '0' && cp <= '9') || (cp >= 'A' && cp <= 'Z') || (cp >= 'a' && cp <= 'z') || cp == '_') return std::string(1, static_cast<char>(cp));
      if (cp < 0x80) std::snprintf(buf, sizeof buf, "\\x%02X", cp);
      else if (cp <= 0xFFFF) std::snprintf(buf, sizeof buf, "\\u%04X", cp);
      else std::snprintf(buf, sizeof buf, "\\U%08X", cp);
      return std::string{buf};
    };
    static constexpr std::pair<char, std::uint32_t> short_escapes[] = {
        {'"', '"'}, {'\\', '\\'}, {'/', '/'}, {'b', 8}, {'f', 12}, {'n', 10}, {'r', 13}, {'t', 9}};
    const std::string free = new_rule("json-char* \"\\\"\"", "key-rest");
    std::vector<std::string> names(trie.size());
    for (std::size_t n = 0; n < trie.size(); ++n) names[n] = "key-" + std::to_string(counter_++);
    for (std::size_t n = 0; n < trie.size(); ++n) {
      std::string body;
      auto alt = [&body](const std::string& a) { body += (body.empty() ? "" : " | ") + a; };
      if (!trie[n].name) alt("\"\\\"\"");
      // Letters and digits first, escapes after them (a hex digit after \xHH would read as
      // part of it in xgrammar's parser), then the characters no key takes raw.
      std::string raw, escaped;
      for (const auto& [cp, child] : trie[n].next) {
        if (cp >= 0x20 && cp != '"' && cp != '\\') alt("\"" + code(cp) + "\" " + names[child]);
        (code(cp).size() == 1 ? raw : escaped) += code(cp);
      }
      alt("[^" + raw + escaped + "\"\\\\\\x00-\\x1F] " + free);
      std::string off = "[";
      for (const auto& [c, decoded] : short_escapes) {
        auto it = trie[n].next.find(decoded);
        if (it != trie[n].next.end()) alt("\"\\\\" + std::string(c == '"' || c == '\\' ? "\\" : "") + c + "\" " + names[it->second]);
        else off += std::string(c == '\\' ? "\\" : "") + c;
      }
      if (off.size() > 1) alt("\"\\\\\" " + off + "] " + free);
      rules_ += names[n] + " ::= " + body + "\n";
    }
    return "\"\\\"\" " + names[0];
  }

  expected<std::string, error> array(const json& s, const std::string& ptr, std::uint32_t depth) {
    std::string item;
    if (s.contains("items")) {
      if (s["items"].is_array()) return fail(ptr + "/items", "'items' as an array (tuple validation) is not supported");
      auto v = visit(s["items"], ptr + "/items", depth + 1);
      if (!v) return v;
      item = as_rule(*v);
    } else {
      item = any_value();
    }
    auto lo = count(s, "minItems", ptr);
    if (!lo) return unexpected(lo.error());
    auto hi = count(s, "maxItems", ptr);
    if (!hi) return unexpected(hi.error());
    std::int64_t min = lo->value_or(0);
    if (*hi && **hi < min) return fail(ptr + "/maxItems", "'maxItems' is below 'minItems'");
    if (*hi && **hi == 0) return std::string{"\"[]\""};
    std::string rest = "(\",\" " + item + "){" + std::to_string(std::max<std::int64_t>(min - 1, 0)) + "," +
                       (*hi ? std::to_string(**hi - 1) : "") + "}";
    std::string body = item + " " + rest;
    return "\"[\" " + (min == 0 ? "(" + body + ")?" : body) + " \"]\"";
  }

  expected<std::string, error> string(const json& s, const std::string& ptr) {
    const bool has_len = s.contains("minLength") || s.contains("maxLength");
    if (s.contains("pattern")) {
      if (has_len || s.contains("format"))
        return fail(ptr + "/pattern", "'pattern' together with minLength, maxLength or format is not supported");
      if (!s["pattern"].is_string()) return fail(ptr + "/pattern", "'pattern' must be a string");
      auto g = regex_to_gbnf(s["pattern"].get<std::string>(), ptr + "/pattern", opt_.lim);
      if (!g) return unexpected(g.error());
      return "\"\\\"\" " + new_rule(*g, "pattern") + " \"\\\"\"";
    }
    if (s.contains("format")) {
      if (has_len) return fail(ptr + "/format", "'format' together with minLength or maxLength is not supported");
      const json& f = s["format"];
      const std::string name = f.is_string() ? f.get<std::string>() : "";
      std::string body;
      if (name == "date-time") body = "date \"T\" time";
      else if (name == "date") body = "date";
      else if (name == "time") body = "time";
      else if (name == "uuid") body = "uuid";
      else return fail(ptr + "/format", "unsupported format '" + (f.is_string() ? name : f.dump()) + "' (supported: date-time, date, time, uuid)");
      return "\"\\\"\" " + body + " \"\\\"\"";
    }
    if (!has_len) return std::string{"json-string"};
    auto lo = count(s, "minLength", ptr);
    if (!lo) return unexpected(lo.error());
    auto hi = count(s, "maxLength", ptr);
    if (!hi) return unexpected(hi.error());
    if (*hi && **hi < lo->value_or(0)) return fail(ptr + "/maxLength", "'maxLength' is below 'minLength'");
    return "\"\\\"\" json-char{" + std::to_string(lo->value_or(0)) + "," + (*hi ? std::to_string(**hi) : "") + "} \"\\\"\"";
  }

  /// An integer bound from `key`, rounded inward; `exclusive` bounds move by one.
  expected<std::optional<std::int64_t>, error> bound(const json& s, const char* key, bool upper, bool exclusive,
                                                     const std::string& ptr) {
    if (!s.contains(key)) return std::optional<std::int64_t>{};
    const json& v = s[key];
    if (v.is_boolean()) return fail(ptr + "/" + key, std::string{"boolean '"} + key + "' (draft 4) is not supported; use a number");
    if (!v.is_number()) return fail(ptr + "/" + key, std::string{"'"} + key + "' must be a number");
    double d = v.get<double>();
    if (!(std::fabs(d) <= static_cast<double>(max_magnitude)))
      return fail(ptr + "/" + key, std::string{"'"} + key + "' is beyond the supported integer range (18 digits)");
    std::int64_t b;
    if (v.is_number_integer()) b = v.get<std::int64_t>();
    else b = static_cast<std::int64_t>(upper ? std::floor(d) : std::ceil(d));
    const bool integral = v.is_number_integer() || std::floor(d) == d;
    if (exclusive && integral) b += upper ? -1 : 1;
    return std::optional<std::int64_t>{b};
  }

  expected<std::string, error> integer(const json& s, const std::string& ptr) {
    std::optional<std::int64_t> lo, hi;
    for (auto [key, upper, excl] : {std::tuple{"minimum", false, false}, std::tuple{"exclusiveMinimum", false, true},
                                    std::tuple{"maximum", true, false}, std::tuple{"exclusiveMaximum", true, true}}) {
      auto b = bound(s, key, upper, excl, ptr);
      if (!b) return unexpected(b.error());
      if (!*b) continue;
      auto& slot = upper ? hi : lo;
      slot = !slot ? **b : upper ? std::min(*slot, **b) : std::max(*slot, **b);
    }
    if (!lo && !hi) return std::string{"json-int"};
    if (lo && hi && *lo > *hi) return fail(ptr, "the integer bounds admit no value");
    std::vector<std::string> alts;
    // Negative part: -m for m in [max(1, -hi), -lo] (or unbounded below).
    if (!lo || *lo < 0) {
      std::int64_t m_lo = hi && *hi < 0 ? -*hi : 1;
      alts.push_back("\"-\" " + uint_range(m_lo, lo ? std::optional<std::int64_t>{-*lo} : std::nullopt));
    }
    if (!hi || *hi >= 0) alts.push_back(uint_range(lo && *lo > 0 ? *lo : 0, hi));
    std::string body;
    for (const auto& a : alts) body += (body.empty() ? "" : " | ") + a;
    return new_rule(body, "int");
  }

  /// Non-negative decimals x with lo <= x <= hi (or < where exclusive; `bounded` false: no upper
  /// bound), lo and hi whole numbers: an integer part and an optional fraction, no exponent.
  std::string magnitude(std::int64_t lo, bool lo_excl, bool bounded, std::int64_t hi, bool hi_excl) {
    const std::string frac = "(\".\" [0-9]{1,15})?";
    const std::string frac_zero = "(\".\" \"0\"{1,15})?";
    const std::string frac_nonzero = "\".\" \"0\"{0,14} [1-9] [0-9]{0,14}";
    std::vector<std::string> alts;
    const std::string lo_s = "\"" + std::to_string(lo) + "\"";
    if (bounded && hi == lo) {
      if (!lo_excl && !hi_excl) alts.push_back(lo_s + " " + frac_zero);
    } else if (!bounded || hi > lo) {
      alts.push_back(lo_s + " " + (lo_excl ? frac_nonzero : frac)); // x in [lo, lo+1)
      if (!bounded || hi - 1 >= lo + 1)
        alts.push_back(uint_range(lo + 1, bounded ? std::optional<std::int64_t>{hi - 1} : std::nullopt) + " " + frac);
      if (bounded && !hi_excl) alts.push_back("\"" + std::to_string(hi) + "\" " + frac_zero); // x == hi
    }
    std::string out;
    for (const auto& a : alts) out += (out.empty() ? "" : " | ") + a;
    return out;
  }

  expected<std::string, error> number(const json& s, const std::string& ptr) {
    // Whole-number bounds, kept exactly with their exclusivity; the tightest of each side wins.
    std::optional<std::int64_t> lo, hi;
    bool lo_excl = false, hi_excl = false;
    for (auto [key, upper, excl] : {std::tuple{"minimum", false, false}, std::tuple{"exclusiveMinimum", false, true},
                                    std::tuple{"maximum", true, false}, std::tuple{"exclusiveMaximum", true, true}}) {
      if (!s.contains(key)) continue;
      const json& v = s[key];
      if (v.is_boolean()) return fail(ptr + "/" + key, std::string{"boolean '"} + key + "' (draft 4) is not supported; use a number");
      if (!v.is_number()) return fail(ptr + "/" + key, std::string{"'"} + key + "' must be a number");
      const double d = v.get<double>();
      if (!(std::fabs(d) <= static_cast<double>(max_magnitude)))
        return fail(ptr + "/" + key, std::string{"'"} + key + "' is beyond the supported range (18 digits)");
      if (std::floor(d) != d)
        return fail(ptr + "/" + key, std::string{"'"} + key + "' on type number must be a whole number (fractional bounds are not supported)");
      const std::int64_t b = v.is_number_integer() ? v.get<std::int64_t>() : static_cast<std::int64_t>(d);
      auto& slot = upper ? hi : lo;
      bool& slot_excl = upper ? hi_excl : lo_excl;
      const bool tighter = !slot || (upper ? b < *slot : b > *slot) || (b == *slot && excl);
      if (tighter) { slot = b; slot_excl = excl; }
    }
    if (!lo && !hi) return std::string{"json-number"};
    if (lo && hi && (*lo > *hi || (*lo == *hi && (lo_excl || hi_excl))))
      return fail(ptr, "the number bounds admit no value");
    std::vector<std::string> alts;
    // Negative values -x: x > 0, bounded by -hi from below (when hi < 0) and by -lo from above.
    if (!lo || *lo < 0) {
      const std::int64_t most = lo ? -*lo : 0;
      std::string m = hi && *hi < 0 ? magnitude(-*hi, hi_excl, lo.has_value(), most, lo_excl)
                                    : magnitude(0, true, lo.has_value(), most, lo_excl);
      if (!m.empty()) alts.push_back("\"-\" (" + m + ")");
    }
    // Values x >= 0.
    if (!hi || *hi > 0 || (*hi == 0 && !hi_excl)) {
      const bool from_lo = lo && *lo >= 0;
      std::string m = magnitude(from_lo ? *lo : 0, from_lo && lo_excl, hi.has_value(), hi.value_or(0), hi_excl);
      if (!m.empty()) alts.push_back("(" + m + ")");
    }
    if (alts.empty()) return fail(ptr, "the number bounds admit no value");
    std::string body;
    for (const auto& a : alts) body += (body.empty() ? "" : " | ") + a;
    return new_rule(body, "num");
  }
};

} // namespace

expected<std::string, error> json_schema_to_gbnf(std::string_view schema, const json_schema_options& opt) {
  if (schema.size() > opt.lim.max_text)
    return unexpected(error{"", "the schema is longer than " + std::to_string(opt.lim.max_text) + " bytes"});
  json doc;
  try {
    doc = json::parse(schema);
  } catch (const json::parse_error& e) {
    return unexpected(error{"", std::string{"the schema is not valid JSON: "} + e.what()});
  }
  return compiler{doc, opt}.run();
}

expected<std::shared_ptr<const grammar>, error> compile_json_schema(std::string_view schema,
                                                                    const json_schema_options& opt) {
  auto text = json_schema_to_gbnf(schema, opt);
  if (!text) return unexpected(text.error());
  // The generated text nests a few parentheses per schema level: its own nesting bound follows
  // from the schema's.
  limits lim = opt.lim;
  lim.max_nesting = 8 * opt.lim.max_nesting + 64;
  auto g = compile_gbnf(*text, lim);
  if (!g) return unexpected(error{"", "internal: the generated grammar does not compile: " + g.error().message()});
  return g;
}

std::shared_ptr<const grammar> any_json_object(const json_schema_options& opt) {
  auto g = compile_json_schema(R"({"type":"object"})", opt);
  return g ? *g : nullptr;
}

} // namespace kvlane::grammar
