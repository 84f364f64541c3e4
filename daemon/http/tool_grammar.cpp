#include "daemon/http/tool_grammar.hpp"

#include "common/grammar/json_schema.hpp"

#include <fmt/format.h>

namespace kvlane::daemon::http {

namespace {

bool is_name_char(char c) noexcept {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_'
         || c == '-';
}

} // namespace

std::string_view tool_call_trigger(backends::tool_call_syntax syntax) noexcept {
  switch (syntax) {
  case backends::tool_call_syntax::hermes:
    return "<tool_call>";
  case backends::tool_call_syntax::llama3:
    return "{\"name\"";
  case backends::tool_call_syntax::none:
    break;
  }
  return {};
}

bool supports_parallel_calls(backends::tool_call_syntax syntax) noexcept {
  return syntax == backends::tool_call_syntax::hermes;
}

std::string gbnf_literal(std::string_view text) {
  std::string out = "\"";
  for (const char ch : text) {
    const auto c = static_cast<unsigned char>(ch);
    switch (c) {
    case '"': out += "\\\""; break;
    case '\\': out += "\\\\"; break;
    case '\n': out += "\\n"; break;
    case '\r': out += "\\r"; break;
    case '\t': out += "\\t"; break;
    default:
      if (c < 0x20 || c == 0x7f)
        out += fmt::format("\\x{:02X}", c);
      else
        out += ch;
    }
  }
  return out + "\"";
}

std::string prefix_gbnf_rules(std::string_view gbnf, std::string_view prefix) {
  std::string out;
  out.reserve(gbnf.size() + gbnf.size() / 4);
  std::size_t i = 0;
  // Copies a quoted run (a literal or a class) up to its unescaped closing `close`.
  auto copy_quoted = [&](char close) {
    out += gbnf[i++];
    while (i < gbnf.size()) {
      const char c = gbnf[i++];
      out += c;
      if (c == '\\' && i < gbnf.size())
        out += gbnf[i++];
      else if (c == close)
        return;
    }
  };
  while (i < gbnf.size()) {
    const char c = gbnf[i];
    if (c == '"') {
      copy_quoted('"');
    } else if (c == '[') {
      copy_quoted(']');
    } else if (c == '{') { // a repetition count {m,n}
      while (i < gbnf.size() && gbnf[i] != '}')
        out += gbnf[i++];
    } else if (c == '#') {
      while (i < gbnf.size() && gbnf[i] != '\n')
        out += gbnf[i++];
    } else if (is_name_char(c)) {
      out += prefix;
      while (i < gbnf.size() && is_name_char(gbnf[i]))
        out += gbnf[i++];
    } else {
      out += gbnf[i++];
    }
  }
  return out;
}

expected<std::string, api_error> tool_calls_gbnf(backends::tool_call_syntax syntax,
                                                 std::span<const backends::chat_tool> tools,
                                                 bool parallel, std::string_view start) {
  const std::string s{start};
  std::string rules, alternatives;
  for (std::size_t i = 0; i < tools.size(); ++i) {
    const auto& t = tools[i];
    auto args = grammar::json_schema_to_gbnf(t.parameters);
    if (!args) {
      const auto param = fmt::format("tools[{}].function.parameters", i);
      return unexpected(invalid(param, fmt::format("'{}' of tool \"{}\": {}", param, t.name,
                                                   args.error().message())));
    }
    const auto prefix = fmt::format("{}-t{}-", s, i);
    rules += prefix_gbnf_rules(*args, prefix);
    // ws: the one space models put after a ':' or ',' of the envelope, or none.
    std::string envelope;
    if (syntax == backends::tool_call_syntax::hermes)
      envelope = fmt::format(R"("<tool_call>" "\n"? "{{\"name\":" {0}-ws {1} "," {0}-ws )"
                             R"("\"arguments\":" {0}-ws {2}root {0}-ws "}}" "\n"? "</tool_call>")",
                             s, gbnf_literal("\"" + t.name + "\""), prefix);
    else
      envelope = fmt::format(R"("{{\"name\":" {0}-ws {1} "," {0}-ws "\"parameters\":" {0}-ws )"
                             R"({2}root "}}")",
                             s, gbnf_literal("\"" + t.name + "\""), prefix);
    rules += fmt::format("{}-call-{} ::= {}\n", s, i, envelope);
    alternatives += fmt::format("{}{}-call-{}", alternatives.empty() ? "" : " | ", s, i);
  }
  rules += fmt::format("{}-ws ::= \" \"?\n", s);
  rules += fmt::format("{}-call ::= {}\n", s, alternatives);
  if (parallel && supports_parallel_calls(syntax))
    rules += fmt::format("{0} ::= {0}-call (\"\\n\" {0}-call)*\n", s);
  else
    rules += fmt::format("{0} ::= {0}-call\n", s);
  return rules;
}

} // namespace kvlane::daemon::http
