#include "daemon/http/json_reader.hpp"

#include "daemon/http/request_decoder.hpp"

#include <algorithm>
#include <cmath>

namespace kvlane::daemon::http {

namespace {

/// Nesting depth of `body` outside strings, or past `limit` (stops early).
std::size_t nesting_depth(std::string_view body, std::size_t limit) {
  std::size_t depth = 0, deepest = 0;
  bool in_string = false, escaped = false;
  for (char c : body) {
    if (in_string) {
      if (escaped)
        escaped = false;
      else if (c == '\\')
        escaped = true;
      else if (c == '"')
        in_string = false;
      continue;
    }
    if (c == '"') {
      in_string = true;
    } else if (c == '{' || c == '[') {
      deepest = std::max(deepest, ++depth);
      if (deepest > limit)
        return deepest;
    } else if ((c == '}' || c == ']') && depth > 0) {
      --depth;
    }
  }
  return deepest;
}

} // namespace

expected<nlohmann::ordered_json, api_error> parse_ordered_object(std::string_view body) {
  if (nesting_depth(body, max_json_depth) > max_json_depth)
    return unexpected(invalid("", fmt::format("malformed JSON: nested deeper than {} levels",
                                              max_json_depth), "invalid_json"));
  nlohmann::ordered_json doc;
  try {
    doc = nlohmann::ordered_json::parse(body.begin(), body.end());
  } catch (const nlohmann::ordered_json::exception& e) {
    std::string what = e.what();
    // "[json.exception.parse_error.101] parse error at line 1, column 2: ..." -> from "parse error"
    if (auto at = what.find("] "); at != std::string::npos)
      what.erase(0, at + 2);
    return unexpected(invalid("", "malformed JSON: " + what, "invalid_json"));
  }
  if (!doc.is_object())
    return unexpected(invalid("", "the request body must be a JSON object", "invalid_json"));
  return doc;
}

api_error wrong_type(const std::string& param, std::string_view expected, const nlohmann::ordered_json& v) {
  return invalid(param, fmt::format("'{}' must be {}, got {}", param, expected, v.type_name()));
}

field_status read_string(const nlohmann::ordered_json& v, const std::string& param, std::string& out,
                         std::size_t max_bytes) {
  if (!v.is_string())
    return unexpected(wrong_type(param, "a string", v));
  const auto& s = v.get_ref<const std::string&>();
  if (s.size() > max_bytes)
    return unexpected(invalid(param, fmt::format("'{}' is longer than {} bytes", param, max_bytes)));
  out = s;
  return {};
}

field_status read_bool(const nlohmann::ordered_json& v, const std::string& param, bool& out) {
  if (!v.is_boolean())
    return unexpected(wrong_type(param, "a boolean", v));
  out = v.get<bool>();
  return {};
}

field_status read_real(const nlohmann::ordered_json& v, const std::string& param, float& out, double lo, double hi) {
  if (!v.is_number())
    return unexpected(wrong_type(param, "a number", v));
  const double x = v.get<double>();
  if (!std::isfinite(x) || x < lo || x > hi)
    return unexpected(invalid(param, fmt::format("'{}' must be between {} and {}, got {}", param,
                                                 lo, hi, x)));
  out = static_cast<float>(x);
  return {};
}

} // namespace kvlane::daemon::http
