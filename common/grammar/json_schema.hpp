#pragma once

// kvlane::grammar::compile_json_schema — JSON Schema (a documented subset) to a grammar whose
// sentences are exactly compact JSON documents valid for the schema (within the limits below).
//
// Output form: compact JSON, no whitespace anywhere (so a schema without unbounded strings,
// arrays or recursion is a finite language); object properties in the order the schema lists
// them.
//
// Supported keywords: type (a name or an array of names), properties, required,
// additionalProperties (false, true or a schema; when absent it is false for an object that
// lists properties and true for one that does not; an additional key is never one of the listed
// names, and while it still follows one of them its characters are taken raw or as short
// escapes, \uXXXX only off the names), enum, const, items, minItems, maxItems, anyOf, oneOf
// (when no value can match two branches: they differ by type, by constant value, or are objects
// that both require a property whose schemas share no value, a tagged union; overlapping
// branches are an error naming oneOf, never read as anyOf), $ref to #/$defs/...,
// #/definitions/... or any local JSON pointer (recursion allowed), minLength and maxLength (in
// characters, an escape counting as one), pattern (regex.hpp's subset), minimum, maximum,
// exclusiveMinimum and exclusiveMaximum (on integers enforced exactly, fractional bounds rounded
// inward; on numbers whole-number bounds enforced exactly, fraction digits included, and a
// bounded number is written without an exponent; a fractional bound on a number is an error),
// format date-time, date, time and uuid. Annotations ($schema, $id, $comment, title,
// description, examples, default, deprecated, readOnly, writeOnly) are ignored, and so is a
// propertyNames every key meets (true, {} or {"type":"string"});
// $defs/definitions hold subschemas. Any other keyword is an error naming it and its JSON
// pointer, never ignored; so is pattern together with minLength, maxLength or format, and
// format together with minLength or maxLength.
//
// Bounds, so the language is finite where the schema is: integers have at most 19 digits,
// numbers at most 16 integer digits, 15 fraction digits and a 2-digit exponent (so every number
// fits a double: 1e999 would read as Infinity); "any value"
// (schema true, {} or an object without properties) nests at most `max_any_depth` levels.
//
// Checked against xgrammar's own JSON Schema compiler by tests/grammar_xcheck (docs/grammar.md
// lists where the two differ and which is right).

#include "common/grammar/grammar.hpp"

#include <memory>
#include <string>
#include <string_view>

namespace kvlane::grammar {

struct json_schema_options {
  limits lim{};
  std::uint32_t max_any_depth = 6;
};

/// `schema`: the schema document as JSON text.
expected<std::shared_ptr<const grammar>, error> compile_json_schema(std::string_view schema,
                                                                    const json_schema_options& opt = {});
/// The same, stopping at the GBNF text (for logs, tests and the benchmark).
expected<std::string, error> json_schema_to_gbnf(std::string_view schema, const json_schema_options& opt = {});

/// Any JSON object (OpenAI's response_format json_object, Ollama's format "json"), compact,
/// nested at most opt.max_any_depth levels.
std::shared_ptr<const grammar> any_json_object(const json_schema_options& opt = {});

} // namespace kvlane::grammar
