#include "actors/keep_alive.hpp"

#include <doctest/doctest.h>

using kvlane::actors::keep_alive;
using kvlane::actors::keep_alive_seconds;
using kvlane::actors::parse_keep_alive;
using namespace std::chrono_literals;

namespace {

std::chrono::milliseconds idle_of(std::string_view text) {
  const auto sut = parse_keep_alive(text);
  REQUIRE_MESSAGE(sut, text);
  REQUIRE_FALSE(sut->is_pinned());
  return sut->idle();
}

} // namespace

TEST_CASE("keep_alive: Go duration strings parse as Ollama reads them") {
  CHECK(idle_of("5m") == 5min);
  CHECK(idle_of("1h30m") == 90min);
  CHECK(idle_of("30s") == 30s);
  CHECK(idle_of("2.5s") == 2500ms);
  CHECK(idle_of("1.5h") == 90min);
  CHECK(idle_of("300ms") == 300ms);
  CHECK(idle_of("1h2m3s4ms") == 1h + 2min + 3s + 4ms);
  CHECK(idle_of("+10s") == 10s);
  CHECK(idle_of("0") == 0ms);
  CHECK(idle_of("0s") == 0ms);
  CHECK(idle_of("-0") == 0ms);
  // Below a millisecond, but not 0: the model stays until the request ends, then goes.
  CHECK(idle_of("500us") == 1ms);
  CHECK(idle_of("1ns") == 1ms);
  CHECK(idle_of("1\xC2\xB5s") == 1ms);
}

TEST_CASE("keep_alive: a negative duration, -1 and \"pinned\" keep the model loaded") {
  for (const auto* text : {"-1", "-1m", "-5m30s", "-0.5", "pinned"}) {
    const auto sut = parse_keep_alive(text);
    REQUIRE_MESSAGE(sut, text);
    CHECK_MESSAGE(sut->is_pinned(), text);
  }
}

TEST_CASE("keep_alive: a string that is not a duration is refused with what is wrong") {
  const auto check_bad = [](std::string_view text, std::string_view why) {
    const auto sut = parse_keep_alive(text);
    REQUIRE_FALSE_MESSAGE(sut, text);
    CHECK_MESSAGE(sut.error().find(std::string{"keep_alive '"} + std::string{text} + "'")
                    != std::string::npos,
                  sut.error());
    CHECK_MESSAGE(sut.error().find(why) != std::string::npos, sut.error());
  };
  check_bad("", "empty");
  check_bad("5", "without a unit");
  check_bad("300", "without a unit");
  check_bad("5 m", "unknown unit");
  check_bad("5d", "unknown unit");
  check_bad("m5", "expected a number");
  check_bad("1..5s", "two decimal points");
  check_bad("forever", "expected a number");
  const auto long_one = parse_keep_alive("1000000h");
  REQUIRE_FALSE(long_one);
  CHECK(long_one.error().find("too long") != std::string::npos);
}

TEST_CASE("keep_alive: a number is seconds; negative pins, 0 unloads after the request") {
  CHECK(keep_alive_seconds(300)->idle() == 5min);
  CHECK(keep_alive_seconds(0.25)->idle() == 250ms);
  CHECK(keep_alive_seconds(0)->idle() == 0ms);
  CHECK(keep_alive_seconds(-1)->is_pinned());
  CHECK_FALSE(keep_alive_seconds(std::numeric_limits<double>::infinity()));
  CHECK_FALSE(keep_alive_seconds(1e300));
}

TEST_CASE("keep_alive: to_string writes what the parser reads back") {
  for (const auto* text : {"5m", "1h30m", "30s", "0s", "250ms", "2.500s", "pinned"}) {
    const auto sut = parse_keep_alive(text);
    REQUIRE_MESSAGE(sut, text);
    CHECK(to_string(*sut) == text);
    CHECK(*parse_keep_alive(to_string(*sut)) == *sut);
  }
}
