#include "daemon/http/tool_calls.hpp"

#include "daemon/http/json_reader.hpp"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <set>

namespace kvlane::daemon::http {

namespace {

using json = nlohmann::ordered_json;
using status = expected<void, api_error>;

status check_name(const std::string& name, const std::string& param) {
  if (name.empty() || name.size() > max_tool_name)
    return unexpected(invalid(param, fmt::format("'{}' must be 1 to {} characters, got {}", param,
                                                 max_tool_name, name.size())));
  for (const char c : name)
    if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_'
          || c == '-'))
      return unexpected(invalid(param, fmt::format("'{}' may hold only letters, digits, '_' and "
                                                   "'-', got \"{}\"",
                                                   param, name)));
  return {};
}

status read_name(const json& v, const std::string& param, std::string& out) {
  if (!v.is_string())
    return unexpected(wrong_type(param, "a string", v));
  out = v.get<std::string>();
  return check_name(out, param);
}

/// `v` must be {"type": "function", "function": {...}}; returns the inner object.
expected<const json*, api_error> function_of(const json& v, const std::string& param, bool type_required) {
  if (!v.is_object())
    return unexpected(wrong_type(param, "an object", v));
  const json* fn = nullptr;
  bool has_type = false;
  for (const auto& [k, x] : v.items()) {
    if (k == "type") {
      if (!x.is_string())
        return unexpected(wrong_type(param + ".type", "a string", x));
      if (x.get<std::string>() != "function")
        return unexpected(unsupported(param + ".type", fmt::format("only \"function\" tools are, got \"{}\"",
                                                                    x.get<std::string>())));
      has_type = true;
    } else if (k == "function") {
      if (!x.is_object())
        return unexpected(wrong_type(param + ".function", "an object", x));
      fn = &x;
    } else {
      return unexpected(unsupported(param + "." + k));
    }
  }
  if (type_required && !has_type)
    return unexpected(invalid(param + ".type", fmt::format("'{}.type' is required", param)));
  if (fn == nullptr)
    return unexpected(invalid(param + ".function", fmt::format("'{}.function' is required", param)));
  return fn;
}

} // namespace

expected<std::vector<backends::chat_tool>, api_error> decode_tools(const json& v) {
  if (!v.is_array())
    return unexpected(wrong_type("tools", "an array", v));
  if (v.size() > max_tools)
    return unexpected(invalid("tools", fmt::format("'tools' holds {} tools, at most {} are allowed",
                                                   v.size(), max_tools)));
  std::vector<backends::chat_tool> out;
  std::set<std::string> names;
  for (std::size_t i = 0; i < v.size(); ++i) {
    const auto p = fmt::format("tools[{}]", i);
    auto fn = function_of(v[i], p, true);
    if (!fn)
      return unexpected(std::move(fn).error());
    backends::chat_tool t;
    bool has_name = false;
    for (const auto& [k, x] : (*fn)->items()) {
      const auto fp = p + ".function." + k;
      if (k == "name") {
        if (auto ok = read_name(x, fp, t.name); !ok)
          return unexpected(std::move(ok).error());
        has_name = true;
      } else if (k == "description") {
        if (!x.is_string() && !x.is_null())
          return unexpected(wrong_type(fp, "a string", x));
        if (x.is_string())
          t.description = x.get<std::string>();
      } else if (k == "parameters") {
        if (!x.is_object())
          return unexpected(wrong_type(fp, "a JSON Schema object", x));
        t.parameters = x.dump();
      } else if (k == "strict") { // every call is enforced by its schema, strict or not
        if (!x.is_boolean() && !x.is_null())
          return unexpected(wrong_type(fp, "a boolean", x));
      } else {
        return unexpected(unsupported(fp));
      }
    }
    if (!has_name)
      return unexpected(invalid(p + ".function.name", fmt::format("'{}.function.name' is required", p)));
    if (!names.insert(t.name).second)
      return unexpected(invalid(p + ".function.name",
                                fmt::format("'{}.function.name': the tool \"{}\" is defined twice", p, t.name)));
    if (t.parameters.empty())
      t.parameters = R"({"type":"object","properties":{}})";
    out.push_back(std::move(t));
  }
  return out;
}

expected<tool_choice, api_error> decode_tool_choice(const json& v) {
  tool_choice out;
  if (v.is_string()) {
    const auto s = v.get<std::string>();
    if (s == "auto")
      out.m = tool_choice::mode::automatic;
    else if (s == "none")
      out.m = tool_choice::mode::none;
    else if (s == "required")
      out.m = tool_choice::mode::required;
    else
      return unexpected(invalid("tool_choice", fmt::format("'tool_choice' must be \"auto\", \"none\", "
                                                           "\"required\" or a function, got \"{}\"", s)));
    return out;
  }
  auto fn = function_of(v, "tool_choice", true);
  if (!fn)
    return unexpected(std::move(fn).error());
  bool has_name = false;
  for (const auto& [k, x] : (*fn)->items()) {
    if (k != "name")
      return unexpected(unsupported("tool_choice.function." + k));
    if (auto ok = read_name(x, "tool_choice.function.name", out.name); !ok)
      return unexpected(std::move(ok).error());
    has_name = true;
  }
  if (!has_name)
    return unexpected(invalid("tool_choice.function.name", "'tool_choice.function.name' is required"));
  out.m = tool_choice::mode::named;
  return out;
}

expected<void, api_error> check_tool_request(const tool_request& t) {
  if (t.choice_given && t.tools.empty())
    return unexpected(invalid("tool_choice", "'tool_choice' is only allowed when 'tools' are given"));
  if (t.choice.m == tool_choice::mode::named) {
    for (const auto& tool : t.tools)
      if (tool.name == t.choice.name)
        return {};
    return unexpected(invalid("tool_choice.function.name",
                              fmt::format("'tool_choice' names the function \"{}\", which is not "
                                          "among 'tools'", t.choice.name)));
  }
  return {};
}

expected<std::vector<backends::chat_tool_call>, api_error>
decode_message_tool_calls(const json& v, const std::string& param, dialect d) {
  if (!v.is_array())
    return unexpected(wrong_type(param, "an array", v));
  std::vector<backends::chat_tool_call> out;
  for (std::size_t i = 0; i < v.size(); ++i) {
    const auto p = fmt::format("{}[{}]", param, i);
    const auto& c = v[i];
    if (!c.is_object())
      return unexpected(wrong_type(p, "an object", c));
    backends::chat_tool_call call;
    const json* fn = nullptr;
    for (const auto& [k, x] : c.items()) {
      if (k == "id") {
        if (!x.is_string())
          return unexpected(wrong_type(p + ".id", "a string", x));
        call.id = x.get<std::string>();
      } else if (k == "type") {
        if (!x.is_string() || x.get<std::string>() != "function")
          return unexpected(invalid(p + ".type", fmt::format("'{}.type' must be \"function\"", p)));
      } else if (k == "function") {
        if (!x.is_object())
          return unexpected(wrong_type(p + ".function", "an object", x));
        fn = &x;
      } else {
        return unexpected(unsupported(p + "." + k));
      }
    }
    if (fn == nullptr)
      return unexpected(invalid(p + ".function", fmt::format("'{}.function' is required", p)));
    bool has_name = false, has_arguments = false;
    for (const auto& [k, x] : fn->items()) {
      const auto fp = p + ".function." + k;
      if (k == "name") {
        if (auto ok = read_name(x, fp, call.name); !ok)
          return unexpected(std::move(ok).error());
        has_name = true;
      } else if (k == "arguments") {
        // OpenAI: the object as JSON text; Ollama: the object itself.
        if (d == dialect::openai) {
          if (!x.is_string())
            return unexpected(wrong_type(fp, "a string holding a JSON object", x));
          const auto parsed = json::parse(x.get<std::string>(), nullptr, false);
          if (parsed.is_discarded() || !parsed.is_object())
            return unexpected(invalid(fp, fmt::format("'{}' must hold a JSON object", fp)));
          call.arguments = x.get<std::string>();
        } else {
          if (!x.is_object())
            return unexpected(wrong_type(fp, "an object", x));
          call.arguments = x.dump();
        }
        has_arguments = true;
      } else if (k == "index" && d == dialect::ollama) {
        if (!x.is_number_integer())
          return unexpected(wrong_type(fp, "an integer", x));
      } else {
        return unexpected(unsupported(fp));
      }
    }
    if (!has_name)
      return unexpected(invalid(p + ".function.name", fmt::format("'{}.function.name' is required", p)));
    if (!has_arguments)
      call.arguments = "{}";
    out.push_back(std::move(call));
  }
  return out;
}

} // namespace kvlane::daemon::http
