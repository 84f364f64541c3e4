#include "daemon/http/structured_output.hpp"

#include "common/grammar/gbnf.hpp"
#include "common/grammar/json_schema.hpp"
#include "daemon/http/json_reader.hpp"
#include "daemon/http/tool_grammar.hpp"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

namespace kvlane::daemon::http {

namespace {

using json = nlohmann::ordered_json;

/// The largest schema text accepted (the grammar library's own bound on its input).
constexpr std::size_t max_schema_bytes = grammar::limits{}.max_text;

expected<output_format, api_error> schema_format(const json& schema, std::string param) {
  output_format f;
  f.k = output_format::kind::json_schema;
  f.schema = schema.dump();
  if (f.schema.size() > max_schema_bytes)
    return unexpected(invalid(param, fmt::format("'{}' is longer than {} bytes", param, max_schema_bytes)));
  f.param = std::move(param);
  return f;
}

api_error schema_error(const output_format& f, const grammar::error& e) {
  return invalid(f.param, fmt::format("'{}': {}", f.param, e.message()));
}

/// The format's grammar as GBNF rules whose start rule is `start`.
expected<std::string, api_error> format_gbnf(const output_format& f, std::string_view start) {
  auto text = grammar::json_schema_to_gbnf(f.k == output_format::kind::json_object
                                             ? std::string_view{R"({"type":"object"})"}
                                             : std::string_view{f.schema});
  if (!text)
    return unexpected(schema_error(f, text.error()));
  return prefix_gbnf_rules(*text, std::string{start} + "-");
}

expected<std::shared_ptr<const grammar::grammar>, api_error> compile(const std::string& gbnf) {
  auto g = grammar::compile_gbnf(gbnf);
  if (!g) { // the parts compiled alone; together they only can exceed the limits
    api_error e = invalid("tools", fmt::format("the tools' grammar does not compile: {}", g.error().message()));
    return unexpected(std::move(e));
  }
  return std::move(*g);
}

} // namespace

expected<output_format, api_error> decode_response_format(const json& v) {
  if (!v.is_object())
    return unexpected(wrong_type("response_format", "an object", v));
  std::string type;
  const json* spec = nullptr;
  for (const auto& [k, x] : v.items()) {
    if (k == "type") {
      if (!x.is_string())
        return unexpected(wrong_type("response_format.type", "a string", x));
      type = x.get<std::string>();
    } else if (k == "json_schema") {
      if (!x.is_object())
        return unexpected(wrong_type("response_format.json_schema", "an object", x));
      spec = &x;
    } else {
      return unexpected(unsupported("response_format." + k));
    }
  }
  output_format f;
  f.param = "response_format";
  if (type == "text" || type == "json_object") {
    if (spec != nullptr)
      return unexpected(invalid("response_format.json_schema",
                                fmt::format("'response_format.json_schema' is only allowed with type "
                                            "\"json_schema\", got \"{}\"", type)));
    f.k = type == "text" ? output_format::kind::text : output_format::kind::json_object;
    return f;
  }
  if (type != "json_schema")
    return unexpected(invalid("response_format.type",
                              fmt::format("'response_format.type' must be \"text\", \"json_object\" or "
                                          "\"json_schema\", got \"{}\"", type)));
  if (spec == nullptr)
    return unexpected(invalid("response_format.json_schema",
                              "'response_format.json_schema' is required with type \"json_schema\""));
  const json* schema = nullptr;
  bool has_name = false;
  for (const auto& [k, x] : spec->items()) {
    const auto p = "response_format.json_schema." + k;
    if (k == "name") {
      if (!x.is_string() || x.get<std::string>().empty() || x.get<std::string>().size() > 64)
        return unexpected(invalid(p, fmt::format("'{}' must be a string of 1 to 64 characters", p)));
      has_name = true;
    } else if (k == "description") {
      if (!x.is_string())
        return unexpected(wrong_type(p, "a string", x));
    } else if (k == "schema") {
      if (!x.is_object())
        return unexpected(wrong_type(p, "a JSON Schema object", x));
      schema = &x;
    } else if (k == "strict") { // the schema is always enforced
      if (!x.is_boolean() && !x.is_null())
        return unexpected(wrong_type(p, "a boolean", x));
    } else {
      return unexpected(unsupported(p));
    }
  }
  if (!has_name)
    return unexpected(invalid("response_format.json_schema.name",
                              "'response_format.json_schema.name' is required"));
  if (schema == nullptr) { // OpenAI: no schema means any JSON object
    f.k = output_format::kind::json_object;
    return f;
  }
  return schema_format(*schema, "response_format.json_schema.schema");
}

expected<output_format, api_error> decode_ollama_format(const json& v) {
  output_format f;
  f.param = "format";
  if (v.is_string()) {
    const auto s = v.get<std::string>();
    if (s.empty())
      return f;
    if (s != "json")
      return unexpected(invalid("format", fmt::format("'format' must be \"json\" or a JSON Schema "
                                                      "object, got \"{}\"", s)));
    f.k = output_format::kind::json_object;
    return f;
  }
  if (!v.is_object())
    return unexpected(wrong_type("format", "\"json\" or a JSON Schema object", v));
  return schema_format(v, "format");
}

expected<std::shared_ptr<const actors::output_constraint>, api_error>
build_constraint(const output_format& format, const tool_request& tools, backends::chat_format chat,
                 std::string_view model) {
  return build_constraint(format, tools, chat, backends::tool_syntax_of(chat), model);
}

std::vector<backends::token_id> none_banned_tokens(const tool_request& tools,
                                                   backends::tool_call_syntax syntax,
                                                   const backends::tokenizer& tok) {
  if (tools.tools.empty() || tools.choice.m != tool_choice::mode::none)
    return {};
  const auto trigger = tool_call_trigger(syntax);
  if (trigger.empty())
    return {};
  if (const auto id = tok.special_token(trigger))
    return {*id};
  return {};
}

expected<std::shared_ptr<const actors::output_constraint>, api_error>
build_constraint(const output_format& format, const tool_request& tools, backends::chat_format chat,
                 backends::tool_call_syntax syntax, std::string_view model) {
  using mode = tool_choice::mode;
  const bool calls = !tools.tools.empty() && tools.choice.m != mode::none;
  const bool formatted = format.k != output_format::kind::text;
  if (!tools.tools.empty() && syntax == backends::tool_call_syntax::none) {
    const bool own_template =
      chat == backends::chat_format::automatic || chat == backends::chat_format::jinja;
    return unexpected(invalid(
      "tools",
      own_template
        ? fmt::format("the model '{}' cannot take tools: its own chat template (chat_format "
                      "\"{}\") writes no tool-call syntax kvlane knows (hermes <tool_call> "
                      "blocks as Qwen's and Hermes' templates write them, or Llama 3.1's JSON "
                      "calls)",
                      model, backends::to_string(chat))
        : fmt::format("the model '{}' cannot take tools: its chat format \"{}\" has no "
                      "tool-call syntax kvlane knows (chatml and llama3 have, and templates "
                      "that write either)",
                      model, backends::to_string(chat)),
      "tools_not_supported"));
  }
  auto out = std::make_shared<actors::output_constraint>();
  if (!calls) {
    if (!formatted)
      return nullptr;
    if (format.k == output_format::kind::json_object) {
      out->grammar = grammar::any_json_object();
    } else {
      auto g = grammar::compile_json_schema(format.schema);
      if (!g)
        return unexpected(schema_error(format, g.error()));
      out->grammar = std::move(*g);
    }
    return std::shared_ptr<const actors::output_constraint>(std::move(out));
  }
  std::span<const backends::chat_tool> offered = tools.tools;
  bool parallel = tools.parallel;
  if (tools.choice.m == mode::named) {
    for (const auto& t : tools.tools)
      if (t.name == tools.choice.name)
        offered = std::span{&t, 1};
    parallel = false;
  }
  auto gbnf = tool_calls_gbnf(syntax, offered, parallel, "calls");
  if (!gbnf)
    return unexpected(std::move(gbnf).error());
  if (tools.choice.m == mode::automatic && formatted) {
    // Either the formatted answer or the calls, decided by the first token.
    auto answer = format_gbnf(format, "answer");
    if (!answer)
      return unexpected(std::move(answer).error());
    *gbnf += *answer + "root ::= answer-root | calls\n";
  } else {
    *gbnf += "root ::= calls\n";
    if (tools.choice.m == mode::automatic)
      out->triggers.emplace_back(tool_call_trigger(syntax));
  }
  auto g = compile(*gbnf);
  if (!g)
    return unexpected(std::move(g).error());
  out->grammar = std::move(*g);
  return std::shared_ptr<const actors::output_constraint>(std::move(out));
}

} // namespace kvlane::daemon::http
