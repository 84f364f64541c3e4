#include "daemon/http/stop_matcher.hpp"

#include <doctest/doctest.h>

#include <string>
#include <vector>

using kvlane::daemon::http::stop_matcher;

namespace {

/// Feeds `pieces` in order; returns everything released and whether it stopped.
std::pair<std::string, bool> run(stop_matcher& sut, const std::vector<std::string>& pieces) {
  std::string out;
  for (const auto& p : pieces) {
    auto r = sut.feed(p);
    out += r.text;
    if (r.stopped)
      return {out, true};
  }
  out += sut.flush();
  return {out, false};
}

} // namespace

TEST_CASE("stop_matcher: text without stop strings passes through unchanged") {
  stop_matcher sut{{}};
  CHECK(run(sut, {"hello", " ", "world"}) == std::pair<std::string, bool>{"hello world", false});
}

TEST_CASE("stop_matcher: a stop string inside one piece ends the text just before it") {
  stop_matcher sut{{"END"}};
  CHECK(run(sut, {"abcENDdef"}) == std::pair<std::string, bool>{"abc", true});
  CHECK(sut.stopped());
  CHECK(sut.feed("more").text.empty());
  CHECK(sut.flush().empty());
}

TEST_CASE("stop_matcher: a stop string split across every byte never leaks") {
  stop_matcher sut{{"\nUser:"}};
  std::vector<std::string> pieces;
  for (char c : std::string{"Hi there\nUser: next"})
    pieces.emplace_back(1, c);
  std::string released;
  bool stopped = false;
  for (const auto& p : pieces) {
    auto r = sut.feed(p);
    released += r.text;
    CHECK(released.find('\n') == std::string::npos); // never a byte of the stop string
    if (r.stopped) {
      stopped = true;
      break;
    }
  }
  CHECK(stopped);
  CHECK(released == "Hi there");
}

TEST_CASE("stop_matcher: held-back text that turns out not to be a stop is released") {
  stop_matcher sut{{"ab!"}};
  auto r1 = sut.feed("xa");
  CHECK(r1.text == "x"); // "a" might start "ab!"
  auto r2 = sut.feed("b");
  CHECK(r2.text.empty()); // "ab" might too
  auto r3 = sut.feed("c");
  CHECK(r3.text == "abc");
  CHECK_FALSE(r3.stopped);
  auto r4 = sut.feed("a");
  CHECK(r4.text.empty());
  CHECK(sut.flush() == "a"); // the end releases what was held
}

TEST_CASE("stop_matcher: the earliest of several stop strings wins") {
  stop_matcher sut{{"world", "lo w"}};
  CHECK(run(sut, {"hello world"}) == std::pair<std::string, bool>{"hel", true});
}

TEST_CASE("stop_matcher: overlapping prefixes hold back the longest candidate") {
  stop_matcher sut{{"aab"}};
  auto r = sut.feed("aaa");
  CHECK(r.text == "a"); // "aa" may still become "aab"
  auto r2 = sut.feed("b");
  CHECK(r2.stopped);
  CHECK(r2.text.empty()); // "aaab": "a" went out before, "aab" is the stop
}

TEST_CASE("stop_matcher: empty stop strings are ignored") {
  stop_matcher sut{{""}};
  CHECK(run(sut, {"abc"}) == std::pair<std::string, bool>{"abc", false});
}
