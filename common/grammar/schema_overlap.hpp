#pragma once

// kvlane::grammar::schema_overlap — whether two JSON Schemas may admit a common value.
//
// Problem it solves: `oneOf` is compiled as a plain alternation, which is exact only when no
// value matches two branches; a grammar cannot count matches. This judges that, coarsely and
// safely: two schemas are disjoint when the kinds of value they admit (a set of JSON types, or
// the exact values of const and enum) do not meet, or when both are objects that require a
// property whose two schemas are disjoint that way (a discriminator, as zod's
// discriminatedUnion and pydantic write tagged unions). Anything it cannot judge (a `$ref` that
// does not resolve, nesting past the limit, an unknown type) counts as overlapping.
//
// Pure; safe from any thread.

#include <nlohmann/json.hpp>

#include <cstdint>
#include <vector>

namespace kvlane::grammar {

class schema_overlap {
public:
  using json = nlohmann::ordered_json;

  /// `root`: the whole schema (local `$ref`s resolve in it); `max_nesting`: how deep to look.
  schema_overlap(const json& root, std::uint32_t max_nesting) : root_(root), max_nesting_(max_nesting) {}

  /// Whether `a` and `b` certainly admit no common value.
  bool disjoint(const json& a, const json& b) const;

private:
  struct value_kinds;
  value_kinds kinds_of(const json& s, std::uint32_t depth) const;
  /// `s` through its local `$ref`, if it is one; null if that does not resolve.
  const json* resolved(const json& s) const;
  /// Whether two object schemas admit no common value by a discriminator: a property both
  /// require whose two schemas admit no common value (`{"kind":{"const":"a"}}` against
  /// `{"kind":{"const":"b"}}`).
  bool discriminated(const json& a, const json& b) const;

  const json& root_;
  std::uint32_t max_nesting_;
};

} // namespace kvlane::grammar
