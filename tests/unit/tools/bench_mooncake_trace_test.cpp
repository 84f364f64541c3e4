#include "tools/bench/mooncake_trace.hpp"

#include <doctest/doctest.h>

#include <string>

using namespace kvlane::tools::bench;

TEST_CASE("bench mooncake trace: good lines give arrivals in seconds from the first line") {
  auto sut = parse_mooncake(
    "{\"timestamp\": 1000, \"input_length\": 600, \"output_length\": 50, \"hash_ids\": [0, 7]}\n"
    "{\"timestamp\": 4500, \"input_length\": 512, \"output_length\": 1, \"hash_ids\": [0]}\r\n"
    "{\"hash_ids\": [0, 7, 9], \"output_length\": 3, \"input_length\": 1025, \"timestamp\": 4500}\n",
    0, "m.jsonl");
  REQUIRE(sut.has_value());
  REQUIRE(sut->size() == 3);
  CHECK((*sut)[0].arrival_s == 0.0);
  CHECK((*sut)[1].arrival_s == doctest::Approx(3.5));
  CHECK((*sut)[2].arrival_s == doctest::Approx(3.5));
  CHECK((*sut)[0].input_length == 600);
  CHECK((*sut)[0].output_length == 50);
  CHECK((*sut)[0].hash_ids == std::vector<std::uint64_t>{0, 7});
  CHECK((*sut)[2].hash_ids == std::vector<std::uint64_t>{0, 7, 9});
}

TEST_CASE("bench mooncake trace: max_rows reads only the first lines") {
  auto sut = parse_mooncake(
    "{\"timestamp\": 0, \"input_length\": 1, \"output_length\": 1, \"hash_ids\": [0]}\n"
    "not json at all\n",
    1);
  REQUIRE(sut.has_value());
  CHECK(sut->size() == 1);
}

TEST_CASE("bench mooncake trace: a malformed line is an error naming the line and the field") {
  const std::string good =
    "{\"timestamp\": 0, \"input_length\": 10, \"output_length\": 1, \"hash_ids\": [0]}\n";
  struct bad_case {
    std::string line;
    std::string expected;
  };
  const bad_case cases[] = {
    {"{\"timestamp\": 5, \"input_length\": 10", "m.jsonl:2: not valid JSON"},
    {"[1, 2]", "m.jsonl:2: expected a JSON object"},
    {"{\"timestamp\": 5, \"input_length\": 10, \"output_length\": 1}", "m.jsonl:2: hash_ids: missing"},
    {"{\"timestamp\": 5, \"input_length\": 10, \"output_length\": 1, \"hash_ids\": [0], \"x\": 1}",
     "m.jsonl:2: unknown field 'x'"},
    {"{\"timestamp\": -5, \"input_length\": 10, \"output_length\": 1, \"hash_ids\": [0]}",
     "m.jsonl:2: timestamp: expected a whole number of ms >= 0, got -5"},
    {"{\"timestamp\": 5, \"input_length\": 0, \"output_length\": 1, \"hash_ids\": []}",
     "m.jsonl:2: input_length: expected a whole number of tokens >= 1, got 0"},
    {"{\"timestamp\": 5, \"input_length\": 10, \"output_length\": 1.5, \"hash_ids\": [0]}",
     "m.jsonl:2: output_length: expected a whole number of tokens >= 1, got 1.5"},
    {"{\"timestamp\": 5, \"input_length\": 10, \"output_length\": 1, \"hash_ids\": 3}",
     "m.jsonl:2: hash_ids: expected an array of block ids, got 3"},
    {"{\"timestamp\": 5, \"input_length\": 513, \"output_length\": 1, \"hash_ids\": [0]}",
     "m.jsonl:2: hash_ids: input_length 513 needs 2 block ids of 512 tokens, got 1"},
    {"{\"timestamp\": 5, \"input_length\": 600, \"output_length\": 1, \"hash_ids\": [0, \"a\"]}",
     "m.jsonl:2: hash_ids[1]: expected a whole number >= 0, got \"a\""},
    {"", "m.jsonl:2: empty line"},
  };
  for (const auto& c : cases) {
    CAPTURE(c.line);
    auto sut = parse_mooncake(good + c.line + "\n" + good, 0, "m.jsonl");
    REQUIRE_FALSE(sut.has_value());
    CHECK(sut.error().line == 2);
    CHECK(sut.error().message.find(c.expected) == 0);
  }
}

TEST_CASE("bench mooncake trace: lines must be in arrival order") {
  auto sut = parse_mooncake(
    "{\"timestamp\": 900, \"input_length\": 1, \"output_length\": 1, \"hash_ids\": [0]}\n"
    "{\"timestamp\": 800, \"input_length\": 1, \"output_length\": 1, \"hash_ids\": [0]}\n",
    0, "m.jsonl");
  REQUIRE_FALSE(sut.has_value());
  CHECK(sut.error().message == "m.jsonl:2: timestamp: 800 is earlier than the previous line's 900; "
                               "lines must be in arrival order");
}

TEST_CASE("bench mooncake trace: an empty file and a missing file are errors") {
  auto empty = parse_mooncake("", 0, "m.jsonl");
  REQUIRE_FALSE(empty.has_value());
  CHECK(empty.error().message == "m.jsonl:1: the trace has no request lines");
  auto missing = load_mooncake("/nonexistent/kvlane/m.jsonl");
  REQUIRE_FALSE(missing.has_value());
  CHECK(missing.error().line == 0);
  CHECK(missing.error().message.find("cannot read trace '/nonexistent/kvlane/m.jsonl'") == 0);
}
