#include "common/grammar/json_schema.hpp"
#include "common/grammar/matcher.hpp"
#include "tests/unit/grammar/grammar_fixture.hpp"

#include <doctest/doctest.h>

#include <string>
#include <vector>

using namespace kvlane::grammar;

using kvlane::test::accepts;

namespace {

std::shared_ptr<const grammar> schema(std::string_view text) {
  auto g = compile_json_schema(text);
  REQUIRE_MESSAGE(g.has_value(), (g ? std::string{} : g.error().message()));
  return *g;
}

std::string error_of(std::string_view text) {
  auto g = compile_json_schema(text);
  REQUIRE_FALSE(g.has_value());
  return g.error().message();
}

void check_all(const std::shared_ptr<const grammar>& g, const std::vector<std::string>& good,
               const std::vector<std::string>& bad) {
  for (const auto& s : good) CHECK_MESSAGE(accepts(g, s), "should accept " << s);
  for (const auto& s : bad) CHECK_MESSAGE(!accepts(g, s), "should reject " << s);
}

} // namespace

TEST_CASE("grammar json_schema: type, including an array of types, and compact output without whitespace") {
  check_all(schema(R"({"type":"string"})"), {R"("")", R"("a\"b\\c\u00e9\n")", "\"h\xC3\xA9\""},
            {R"( "a")", R"("a)", "\"a\nb\"", R"("\x")", "12"});
  check_all(schema(R"({"type":"integer"})"), {"0", "-7", "1234567890123456789"},
            {"01", "-0x", "1.5", "12345678901234567890", " 1"});
  check_all(schema(R"({"type":"number"})"), {"0", "-1.25", "3e10", "6.02E+23"}, {"1.", ".5", "+1", "1e"});
  // Every number fits a double: an exponent has at most 2 digits (1e999 reads as Infinity).
  check_all(schema(R"({"type":"number"})"), {"1e99", "-9.5E-99", "9999999999999999.5e+99"},
            {"1e100", "8e834", "1e-308", "3e087"});
  check_all(schema(R"({"type":["boolean","null"]})"), {"true", "false", "null"}, {"0", "\"true\""});
}

TEST_CASE("grammar json_schema: properties, required and additionalProperties false give objects in schema order") {
  auto sut = schema(R"({"type":"object","properties":{"a":{"type":"integer"},"b":{"type":"string"},
    "c":{"type":"boolean"}},"required":["b"],"additionalProperties":false})");
  check_all(sut, {R"({"b":"x"})", R"({"a":1,"b":"x"})", R"({"b":"x","c":true})", R"({"a":1,"b":"","c":false})"},
            {R"({})", R"({"a":1})", R"({"b":"x","a":1})", R"({"b":"x",})", R"({,"b":"x"})",
             R"({"b":"x","d":1})", R"({"b": "x"})"});
}

TEST_CASE("grammar json_schema: additionalProperties true or a schema allows further keys after the listed ones") {
  auto sut = schema(R"({"type":"object","properties":{"a":{"type":"integer"}},"additionalProperties":{"type":"string"}})");
  check_all(sut, {R"({})", R"({"a":1})", R"({"a":1,"x":"y","z":""})", R"({"x":"y"})"},
            {R"({"x":1})", R"({"a":1,"x":2})"});
  check_all(schema(R"({"type":"object","additionalProperties":true})"), {R"({"k":[1,{"z":null}]})"}, {"[]"});
  // An additional key is never a listed name, however spelled (a listed property must match
  // its own schema), yet may start like one, extend one or escape characters off the names.
  auto keys = schema(R"({"type":"object","properties":{"ab":{"type":"integer"},"a/\"":{"type":"integer"}},
    "additionalProperties":{"type":"string"}})");
  check_all(keys, {R"({"a":""})", R"({"abc":""})", R"({"b":""})", R"({"":""})", R"({"a\/":""})", R"({"x\u0061":""})",
                   R"({"ab":1,"a\n":""})"},
            {R"({"ab":""})", R"({"a\/\"":""})", R"({"a/\"":""})", R"({"ab":1,"ab":""})", R"({"\u0061b":""})"});
  // No properties and no additionalProperties: any object (bounded depth).
  check_all(schema(R"({"type":"object"})"), {R"({})", R"({"a":{"b":[1,"x",true]}})"}, {R"({"a":})"});
}

TEST_CASE("grammar json_schema: enum and const are exact JSON values") {
  check_all(schema(R"({"enum":["red","green",3,null,{"k":[1]}]})"),
            {R"("red")", R"("green")", "3", "null", R"({"k":[1]})"}, {R"("blue")", "4", R"("Red")"});
  check_all(schema(R"({"const":"café"})"), {"\"caf\xC3\xA9\""}, {R"("cafe")"});
}

TEST_CASE("grammar json_schema: items, minItems and maxItems bound arrays") {
  auto sut = schema(R"({"type":"array","items":{"type":"integer"},"minItems":2,"maxItems":3})");
  check_all(sut, {"[1,2]", "[1,2,3]"}, {"[]", "[1]", "[1,2,3,4]", "[1,\"a\"]", "[1,2,]"});
  check_all(schema(R"({"type":"array","items":{"type":"boolean"}})"), {"[]", "[true,false,true]"}, {"[1]"});
  check_all(schema(R"({"type":"array","maxItems":0})"), {"[]"}, {"[1]"});
}

TEST_CASE("grammar json_schema: anyOf and oneOf are alternatives") {
  check_all(schema(R"({"anyOf":[{"type":"integer"},{"type":"string","maxLength":1}]})"), {"5", R"("a")"},
            {R"("ab")", "true"});
  check_all(schema(R"({"oneOf":[{"const":1},{"const":2}]})"), {"1", "2"}, {"3"});
  check_all(schema(R"({"oneOf":[{"type":"string"},{"enum":[1,null]},{"$ref":"#/$defs/o"}],"$defs":{"o":{"type":"object"}}})"),
            {R"("s")", "1", "null", "{}"}, {"2", "true"});
  // oneOf is exact only when no value can match two branches; otherwise it is refused, not
  // silently read as anyOf.
  CHECK(error_of(R"({"oneOf":[{"type":"integer"},{"type":"number"}]})") ==
        "/oneOf: 'oneOf' branches 0 and 1 may both match a value (oneOf is supported when its branches differ by type, by constant value or by a required property's constant value; use anyOf)");
  CHECK(error_of(R"({"oneOf":[{"enum":["a","b"]},{"type":"string"}]})").find("'oneOf' branches 0 and 1") != std::string::npos);
  CHECK(error_of(R"({"oneOf":[{"const":1},{"const":1.0}]})").find("'oneOf' branches 0 and 1") != std::string::npos);
}

TEST_CASE("grammar json_schema: oneOf of objects told apart by a required property's constant (a tagged union)") {
  // As zod writes z.discriminatedUnion("kind", ...); one branch through a $ref.
  auto sut = schema(R"({"oneOf":[
    {"type":"object","properties":{"kind":{"type":"string","const":"a"},"x":{"type":"boolean"}},"required":["kind","x"],"additionalProperties":false},
    {"$ref":"#/$defs/b"}],
    "$defs":{"b":{"type":"object","properties":{"kind":{"enum":["b","c"]},"y":{"type":"integer"}},"required":["y","kind"],"additionalProperties":false}}})");
  check_all(sut, {R"({"kind":"a","x":true})", R"({"kind":"b","y":1})", R"({"kind":"c","y":2})"},
            {R"({"kind":"a","y":1})", R"({"kind":"b","x":true})", R"({"x":true})"});
  // A value could match both where the tags overlap, where one branch does not require the tag,
  // or where a branch is not only objects (required and properties bind objects alone).
  const char* overlapping[] = {
      R"({"oneOf":[{"type":"object","properties":{"k":{"const":"a"}},"required":["k"]},
                   {"type":"object","properties":{"k":{"enum":["a","b"]}},"required":["k"]}]})",
      R"({"oneOf":[{"type":"object","properties":{"k":{"const":"a"}},"required":["k"]},
                   {"type":"object","properties":{"k":{"const":"b"}}}]})",
      R"({"oneOf":[{"properties":{"k":{"const":"a"}},"required":["k"]},
                   {"type":"object","properties":{"k":{"const":"b"}},"required":["k"]}]})",
  };
  for (const char* text : overlapping)
    CHECK_MESSAGE(error_of(text).find("'oneOf' branches 0 and 1 may both match") != std::string::npos, text);
}

TEST_CASE("grammar json_schema: local $ref to $defs and definitions, recursion included") {
  auto sut = schema(R"({"$defs":{"node":{"type":"object","properties":{"v":{"type":"integer"},
    "next":{"anyOf":[{"$ref":"#/$defs/node"},{"type":"null"}]}},"required":["v","next"],"additionalProperties":false}},
    "$ref":"#/$defs/node"})");
  check_all(sut, {R"({"v":1,"next":null})", R"({"v":1,"next":{"v":2,"next":{"v":3,"next":null}}})"},
            {R"({"v":1})", R"({"v":1,"next":{"v":2}})"});
  check_all(schema(R"({"definitions":{"d":{"type":"string","format":"date"}},"type":"array","items":{"$ref":"#/definitions/d"}})"),
            {R"(["2024-02-29"])"}, {R"(["2024-13-01"])"});
  CHECK(error_of(R"({"$ref":"#/$defs/missing"})") == "/$ref: reference '#/$defs/missing' does not resolve in this schema");
  CHECK(error_of(R"({"$ref":"https://example.com/s.json"})").find("only local references") != std::string::npos);
}

TEST_CASE("grammar json_schema: minLength and maxLength count characters, an escape as one") {
  auto sut = schema(R"({"type":"string","minLength":2,"maxLength":3})");
  check_all(sut, {R"("ab")", R"("abc")", R"("a\n")", "\"\xC3\xA9\xC3\xA9\""}, {R"("a")", R"("abcd")", R"("")"});
}

TEST_CASE("grammar json_schema: pattern in the documented regex subset") {
  auto sut = schema(R"({"type":"string","pattern":"^[A-Z]{2}-\\d{3}(x|yz)?\\.[^0-9]$"})");
  check_all(sut, {R"("AB-123.q")", R"("ZZ-000x.a")", R"("QQ-999yz._")"},
            {R"("A-123.q")", R"("AB-12.q")", R"("AB-123.1")", R"("AB-123xy.q")", R"("AB-123.\"")"});
  check_all(schema(R"({"pattern":"^a\"b$"})"), {R"("a\"b")"}, {R"("ab")"});
  CHECK(error_of(R"({"type":"string","pattern":"abc"})") ==
        "/pattern: pattern must be anchored with ^ at the start and $ at the end (unanchored patterns are not supported)");
  CHECK(error_of(R"({"type":"string","pattern":"^(a)\\1$"})") ==
        "/pattern: backreferences are not supported at offset 6 of the pattern");
  CHECK(error_of(R"({"type":"string","pattern":"^(?=a)b$"})") ==
        "/pattern: lookaround and named groups are not supported at offset 2 of the pattern");
}

TEST_CASE("grammar json_schema: integer minimum, maximum and exclusive bounds are enforced exactly") {
  auto sut = schema(R"({"type":"integer","minimum":-15,"maximum":137})");
  std::vector<std::string> good, bad;
  for (int v = -40; v <= 200; ++v) (v >= -15 && v <= 137 ? good : bad).push_back(std::to_string(v));
  bad.push_back("-0");
  bad.push_back("007");
  check_all(sut, good, bad);
  check_all(schema(R"({"type":"integer","exclusiveMinimum":99})"), {"100", "101", "1000", "99999999"}, {"99", "0", "-5"});
  check_all(schema(R"({"type":"integer","exclusiveMaximum":-3})"), {"-4", "-100"}, {"-3", "0", "5"});
  check_all(schema(R"({"type":"integer","minimum":2.5,"maximum":4.5})"), {"3", "4"}, {"2", "5"});
  check_all(schema(R"({"type":"number","minimum":0})"), {"0", "2.5"}, {"-1"});
  CHECK(error_of(R"({"type":"integer","minimum":5,"maximum":4})") == "/: the integer bounds admit no value");
}

TEST_CASE("grammar json_schema: whole-number bounds on numbers are enforced exactly, fractions included") {
  check_all(schema(R"({"type":"number","minimum":-2,"maximum":3})"),
            {"-2", "-2.0", "-1.99", "-0.5", "0", "0.25", "2.999", "3", "3.000"},
            {"-2.01", "-3", "3.001", "4", "-0", "1e0", "10"});
  check_all(schema(R"({"type":"number","exclusiveMinimum":-2,"exclusiveMaximum":3})"),
            {"-1.999", "-1", "0", "2.5", "2.999999"}, {"-2", "-2.0", "-2.5", "3", "3.0", "3.5"});
  check_all(schema(R"({"type":"number","exclusiveMinimum":5})"), {"5.001", "5.1", "6", "123456.7"}, {"5", "5.0", "5.000", "4.9", "-6"});
  check_all(schema(R"({"type":"number","maximum":-10})"), {"-10", "-10.0", "-11", "-10.5", "-99999"}, {"-9.99", "0", "5"});
  check_all(schema(R"({"type":"number","minimum":7,"maximum":7})"), {"7", "7.00"}, {"7.01", "6.99"});
  CHECK(error_of(R"({"type":"number","maximum":2.5})") ==
        "/maximum: 'maximum' on type number must be a whole number (fractional bounds are not supported)");
  CHECK(error_of(R"({"type":"number","minimum":3,"exclusiveMaximum":3})") == "/: the number bounds admit no value");
}

TEST_CASE("grammar json_schema: format date-time, date, time and uuid") {
  check_all(schema(R"({"type":"string","format":"date-time"})"),
            {R"("2026-12-02T11:15:41Z")", R"("2026-12-02T11:15:41.123+09:00")"},
            {R"("2026-12-02 11:15:41Z")", R"("2026-12-02T24:00:00Z")", R"("2026-12-02T11:15:41")"});
  check_all(schema(R"({"type":"string","format":"uuid"})"), {R"("123e4567-e89b-12d3-a456-426614174000")"},
            {R"("123e4567e89b12d3a456426614174000")", R"("123e4567-e89b-12d3-a456-42661417400g")"});
  CHECK(error_of(R"({"type":"string","format":"email"})") ==
        "/format: unsupported format 'email' (supported: date-time, date, time, uuid)");
}

TEST_CASE("grammar json_schema: an unsupported keyword is an error naming it and its JSON pointer") {
  CHECK(error_of(R"({"type":"object","properties":{"a":{"type":"string","patternProperties":{}}}})") ==
        "/properties/a/patternProperties: unsupported JSON Schema keyword 'patternProperties'");
  CHECK(error_of(R"({"allOf":[{"type":"string"}]})") == "/allOf: unsupported JSON Schema keyword 'allOf'");
  // propertyNames that every key meets (zod's z.record(z.string(), ...)) is no constraint; any
  // other is refused.
  check_all(schema(R"({"type":"object","propertyNames":{"type":"string"},"additionalProperties":{"type":"boolean"}})"),
            {R"({})", R"({"k":true,"l":false})"}, {R"({"k":1})"});
  check_all(schema(R"({"type":"object","propertyNames":true})"), {R"({"k":1})"}, {"[]"});
  CHECK(error_of(R"({"type":"object","propertyNames":{"type":"string","maxLength":3}})") ==
        "/propertyNames: unsupported JSON Schema keyword 'propertyNames'");
  CHECK(error_of(R"({"type":"object","propertyNames":false})") == "/propertyNames: unsupported JSON Schema keyword 'propertyNames'");
  CHECK(error_of(R"({"type":"array","items":{"uniqueItems":true}})") == "/items/uniqueItems: unsupported JSON Schema keyword 'uniqueItems'");
  CHECK(error_of(R"({"type":"array","items":[{"type":"string"}]})") == "/items: 'items' as an array (tuple validation) is not supported");
  CHECK(error_of(R"({"type":"strin"})") == "/type: unknown type 'strin'");
  CHECK(error_of(R"({"type":"object","properties":{"a~/b":{"not":{}}}})") == "/properties/a~0~1b/not: unsupported JSON Schema keyword 'not'");
  CHECK(error_of(R"({"type":"object","properties":{},"required":["x"]})") == "/required/0: required property 'x' is not listed in 'properties'");
  CHECK(error_of("{\"type\":") .find("the schema is not valid JSON") == 0);
  CHECK(error_of("false") == "/: schema 'false' admits no value");
  // Annotations are allowed and ignored.
  CHECK(accepts(schema(R"({"$schema":"https://json-schema.org/draft/2020-12/schema","title":"t","description":"d",
    "examples":[1],"default":1,"type":"integer"})"), "1"));
}

TEST_CASE("grammar json_schema: the json_object grammar accepts any object to its depth bound and nothing else") {
  json_schema_options opt;
  opt.max_any_depth = 3;
  auto sut = any_json_object(opt);
  REQUIRE(sut != nullptr);
  check_all(sut, {"{}", R"({"a":[1,{"b":null}]})"}, {"[]", "1", R"({"a":[[[1]]]})", R"({"a" :1})"});
}

TEST_CASE("grammar json_schema: deep schemas and deep const values are refused with an error, not a crash") {
  std::string deep_const = "{\"const\":" + std::string(100000, '[') + std::string(100000, ']') + "}";
  CHECK(error_of(deep_const) == "/const: 'const' value nested deeper than 64 levels");
  std::string deep_schema;
  for (int k = 0; k < 100; ++k) deep_schema += "{\"type\":\"array\",\"items\":";
  deep_schema += "{\"type\":\"integer\"}" + std::string(100, '}');
  CHECK(error_of(deep_schema).find("schema nested deeper than 64 levels") != std::string::npos);
  // Within the bound, nested arrays compile (the generated text nests deeper than the schema).
  std::string ok_schema;
  for (int k = 0; k < 30; ++k) ok_schema += "{\"type\":\"array\",\"items\":";
  ok_schema += "{\"type\":\"integer\"}" + std::string(30, '}');
  CHECK(accepts(schema(ok_schema), std::string(30, '[') + "7" + std::string(30, ']')));
}
