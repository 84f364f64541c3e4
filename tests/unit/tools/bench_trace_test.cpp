#include "tools/bench/trace.hpp"

#include <doctest/doctest.h>

using namespace kvlane::tools::bench;

namespace {

constexpr std::string_view header = "TIMESTAMP,ContextTokens,GeneratedTokens\n";

std::string trace(std::string_view rows) {
  return std::string{header} + std::string{rows};
}

} // namespace

TEST_CASE("bench trace: good rows give arrival times relative to the first row") {
  auto sut = parse_trace(trace("2023-11-16 18:15:46.6805900,374,44\n"
                               "2023-11-16 18:15:50.9951690,396,109\r\n"
                               "2023-11-16 18:16:00,91,16\n"),
                         0, "t.csv");
  REQUIRE(sut.has_value());
  REQUIRE(sut->size() == 3);
  CHECK((*sut)[0].arrival_s == 0.0);
  CHECK((*sut)[1].arrival_s == doctest::Approx(4.314579));
  CHECK((*sut)[2].arrival_s == doctest::Approx(13.31941));
  CHECK((*sut)[1].prompt_tokens == 396);
  CHECK((*sut)[1].output_tokens == 109);
  CHECK_FALSE((*sut)[0].interactive);
}

TEST_CASE("bench trace: timestamps may be plain seconds and cross midnight and month ends") {
  auto sut = parse_trace(trace("10.5,1,1\n12,2,2\n"));
  REQUIRE(sut.has_value());
  CHECK((*sut)[1].arrival_s == doctest::Approx(1.5));
  auto dates = parse_trace(trace("2024-02-29 23:59:59.5,1,1\n2024-03-01 00:00:00.25,1,1\n"));
  REQUIRE(dates.has_value());
  CHECK((*dates)[1].arrival_s == doctest::Approx(0.75));
}

TEST_CASE("bench trace: only the first N rows are read") {
  auto sut = parse_trace(trace("1,10,10\n2,20,20\n3,30,30\nnot a row\n"), 2);
  REQUIRE(sut.has_value());
  CHECK(sut->size() == 2);
}

TEST_CASE("bench trace: bad rows are errors naming the line") {
  struct bad {
    std::string text;
    std::uint32_t line;
    std::string_view words;
  };
  const bad cases[] = {
    {"TIMESTAMP,Context,Generated\n1,1,1\n", 1, "expected the header"},
    {trace("1,10,10\n2,10\n"), 3, "expected 3 fields"},
    {trace("1,10,10,5\n"), 2, "got 4"},
    {trace("1,10,10\nyesterday,10,10\n"), 3, "TIMESTAMP"},
    {trace("2023-13-01 00:00:00,10,10\n"), 2, "TIMESTAMP"},
    {trace("2023-02-30 00:00:00,10,10\n"), 2, "TIMESTAMP"},
    {trace("1,ten,10\n"), 2, "ContextTokens"},
    {trace("1,10,0\n"), 2, "GeneratedTokens: expected a whole number >= 1, got '0'"},
    {trace("1,10,-3\n"), 2, "GeneratedTokens"},
    {trace("1,10,10\n\n2,10,10\n"), 3, "empty row"},
    {trace("5,10,10\n4,10,10\n"), 3, "earlier than the previous row"},
    {std::string{header}, 1, "no request rows"},
    {"", 1, "empty file"},
  };
  for (auto& c : cases) {
    CAPTURE(c.text);
    auto sut = parse_trace(c.text, 0, "t.csv");
    REQUIRE_FALSE(sut.has_value());
    CHECK(sut.error().line == c.line);
    CHECK(sut.error().message.find(c.words) != std::string::npos);
    CHECK(sut.error().message.rfind("t.csv:" + std::to_string(c.line) + ": ", 0) == 0);
  }
}

TEST_CASE("bench trace: a missing file is an error naming the path") {
  auto sut = load_trace("/nonexistent/trace.csv");
  REQUIRE_FALSE(sut.has_value());
  CHECK(sut.error().line == 0);
  CHECK(sut.error().message.find("/nonexistent/trace.csv") != std::string::npos);
}

TEST_CASE("bench trace: the shipped trace parses") {
  auto sut = load_trace(KVLANE_SOURCE_DIR "/../shared/traces/azure-llm-2023-conv.csv", 200);
  if (!sut.has_value() && sut.error().line == 0)
    return; // the shared traces are not beside this checkout
  REQUIRE(sut.has_value());
  CHECK(sut->size() == 200);
}

TEST_CASE("bench trace: requests longer than the context are clamped and counted") {
  std::vector<trace_request> sut{{0, 100, 20}, {0, 4090, 10}, {0, 10, 5000}, {0, 4000, 96}};
  CHECK(clamp_to_context(sut, 4096) == 2);
  CHECK(sut[0].prompt_tokens == 100);
  CHECK_FALSE(sut[0].clamped);
  CHECK(sut[1].prompt_tokens == 4086); // output kept, prompt cut
  CHECK(sut[1].output_tokens == 10);
  CHECK(sut[1].clamped);
  CHECK(sut[2].output_tokens == 4095); // output alone too long: one prompt token left
  CHECK(sut[2].prompt_tokens == 1);
  CHECK_FALSE(sut[3].clamped); // exactly fits
  for (auto& r : sut)
    CHECK(r.prompt_tokens + r.output_tokens <= 4096);
}
