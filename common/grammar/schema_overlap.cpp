#include "common/grammar/schema_overlap.hpp"

#include <algorithm>
#include <string>

namespace kvlane::grammar {

/// What values a schema may admit, coarsely: a set of JSON types, or (for const and enum)
/// the exact values. Two schemas whose kinds do not overlap admit no common value.
struct schema_overlap::value_kinds {
  static constexpr unsigned object = 1, array = 2, string = 4, number = 8, boolean = 16, null = 32, all = 63;
  unsigned types = 0;                    ///< types admitted by a non-constant part
  std::vector<json> values;              ///< constants admitted besides
  static unsigned type_of(const json& v) {
    if (v.is_object()) return object;
    if (v.is_array()) return array;
    if (v.is_string()) return string;
    if (v.is_number()) return number;
    if (v.is_boolean()) return boolean;
    return null;
  }
  bool overlaps(const value_kinds& o) const {
    if (types & o.types) return true;
    for (const auto& v : values)
      if ((o.types & type_of(v)) || std::find_if(o.values.begin(), o.values.end(), [&](const json& w) {
            return v == w || (v.is_number() && w.is_number() && v.get<double>() == w.get<double>());
          }) != o.values.end())
        return true;
    for (const auto& w : o.values)
      if (types & type_of(w)) return true;
    return false;
  }
};


schema_overlap::value_kinds schema_overlap::kinds_of(const json& s, std::uint32_t depth) const {
  value_kinds k;
  if (depth > max_nesting_ || !s.is_object()) { k.types = value_kinds::all; return k; }
  if (s.contains("$ref") && s["$ref"].is_string()) {
    const std::string target = s["$ref"].get<std::string>();
    try {
      if (!target.empty() && target[0] == '#') return kinds_of(root_.at(json::json_pointer(target.substr(1))), depth + 1);
    } catch (const std::exception&) {
    }
    k.types = value_kinds::all; // reported when the branch itself is compiled
    return k;
  }
  if (s.contains("const")) { k.values.push_back(s["const"]); return k; }
  if (s.contains("enum") && s["enum"].is_array()) { k.values.assign(s["enum"].begin(), s["enum"].end()); return k; }
  for (const char* key : {"anyOf", "oneOf"})
    if (s.contains(key) && s[key].is_array()) {
      for (const auto& a : s[key]) {
        value_kinds b = kinds_of(a, depth + 1);
        k.types |= b.types;
        k.values.insert(k.values.end(), b.values.begin(), b.values.end());
      }
      return k;
    }
  if (!s.contains("type")) { k.types = value_kinds::all; return k; }
  std::vector<std::string> names;
  if (s["type"].is_string()) names.push_back(s["type"].get<std::string>());
  else if (s["type"].is_array())
    for (const auto& t : s["type"]) if (t.is_string()) names.push_back(t.get<std::string>());
  for (const auto& t : names) {
    if (t == "object") k.types |= value_kinds::object;
    else if (t == "array") k.types |= value_kinds::array;
    else if (t == "string") k.types |= value_kinds::string;
    else if (t == "integer" || t == "number") k.types |= value_kinds::number;
    else if (t == "boolean") k.types |= value_kinds::boolean;
    else if (t == "null") k.types |= value_kinds::null;
    else k.types = value_kinds::all;
  }
  return k;
}

const schema_overlap::json* schema_overlap::resolved(const json& s) const {
  if (!s.is_object() || !s.contains("$ref") || !s["$ref"].is_string()) return &s;
  const std::string target = s["$ref"].get<std::string>();
  try {
    if (!target.empty() && target[0] == '#') return &root_.at(json::json_pointer(target.substr(1)));
  } catch (const std::exception&) {
  }
  return nullptr;
}

bool schema_overlap::discriminated(const json& a, const json& b) const {
  const json* x = resolved(a);
  const json* y = resolved(b);
  auto object_only = [](const json* s) {
    return s && s->is_object() && s->contains("type") && (*s)["type"] == "object" && s->contains("required")
           && (*s)["required"].is_array() && s->contains("properties") && (*s)["properties"].is_object();
  };
  if (!object_only(x) || !object_only(y)) return false;
  const json& xp = (*x)["properties"];
  const json& yp = (*y)["properties"];
  for (const auto& name : (*x)["required"]) {
    if (!name.is_string()) continue;
    const auto& yr = (*y)["required"];
    if (std::find(yr.begin(), yr.end(), name) == yr.end()) continue;
    const std::string key = name.get<std::string>();
    if (xp.contains(key) && yp.contains(key) && !kinds_of(xp[key], 1).overlaps(kinds_of(yp[key], 1)))
      return true;
  }
  return false;
}

bool schema_overlap::disjoint(const json& a, const json& b) const {
  return !kinds_of(a, 0).overlaps(kinds_of(b, 0)) || discriminated(a, b);
}

} // namespace kvlane::grammar
