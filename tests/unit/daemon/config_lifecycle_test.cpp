// [[model]] keep_alive and load_at_start, [models]: the model lifecycle's keys
// (docs/config.md).

#include "daemon/config.hpp"
#include "tests/unit/daemon/config_parse.hpp"

#include <doctest/doctest.h>

#include <string>

using namespace kvlane::daemon;
using namespace std::chrono_literals;

using test::minimal;
using test::parse_ok;
using test::parse_error_message;

TEST_CASE("config lifecycle: by default a model loads at start and unloads after 5 minutes idle") {
  const auto sut = parse_ok(std::string{minimal});
  REQUIRE(sut.models.size() == 1);
  CHECK(sut.models[0].load_at_start);
  CHECK(sut.models[0].keep == kvlane::actors::keep_alive::after(5min));
  CHECK(sut.lifecycle.max_loaded == 0);
  CHECK(sut.lifecycle.load_timeout == 5min);
}

TEST_CASE("config lifecycle: the shipped etc/kvlane.toml states the defaults") {
  const auto sut = load(KVLANE_SOURCE_DIR "/etc/kvlane.toml");
  REQUIRE_MESSAGE(sut, (sut ? std::string{} : sut.error().message));
  const config defaults;
  const kvlane::actors::model_config model;
  CHECK(sut->models.at(0).keep == model.keep);
  CHECK(sut->models.at(0).load_at_start == model.load_at_start);
  CHECK(sut->lifecycle == defaults.lifecycle);
}

TEST_CASE("config lifecycle: keep_alive takes a duration, seconds, 0, -1 or \"pinned\"") {
  const auto keep = [](const std::string& value) {
    return parse_ok(std::string{minimal} + "keep_alive = " + value + "\n").models[0].keep;
  };
  CHECK(keep("\"1h30m\"") == kvlane::actors::keep_alive::after(90min));
  CHECK(keep("90") == kvlane::actors::keep_alive::after(90s));
  CHECK(keep("0") == kvlane::actors::keep_alive::after(0s));
  CHECK(keep("\"0\"") == kvlane::actors::keep_alive::after(0s));
  CHECK(keep("-1").is_pinned());
  CHECK(keep("\"pinned\"").is_pinned());
}

TEST_CASE("config lifecycle: a bad keep_alive names the key, its line and what is wrong") {
  auto e = parse_error_message(std::string{minimal} + "keep_alive = \"5 minutes\"\n");
  CHECK_MESSAGE(e.find("model[0].keep_alive") != std::string::npos, e);
  CHECK_MESSAGE(e.find("test.toml:4") != std::string::npos, e);
  CHECK_MESSAGE(e.find("unknown unit") != std::string::npos, e);
  e = parse_error_message(std::string{minimal} + "keep_alive = 1.5\n");
  CHECK_MESSAGE(e.find("model[0].keep_alive") != std::string::npos, e);
  CHECK_MESSAGE(e.find("integer") != std::string::npos, e);
  e = parse_error_message(std::string{minimal} + "load_at_start = \"no\"\n");
  CHECK_MESSAGE(e.find("model[0].load_at_start") != std::string::npos, e);
}

TEST_CASE("config lifecycle: [models] is read, and more models at start than max_loaded is refused") {
  const auto two = std::string{minimal} + "load_at_start = false\n[[model]]\nname = \"n\"\n";
  const auto sut = parse_ok(two + "[models]\nmax_loaded = 1\nload_timeout_ms = 2000\n");
  CHECK(sut.lifecycle.max_loaded == 1);
  CHECK(sut.lifecycle.load_timeout == 2s);
  CHECK_FALSE(sut.models[0].load_at_start);
  CHECK(sut.models[1].load_at_start);

  auto e = parse_error_message(std::string{minimal} + "[[model]]\nname = \"n\"\n[models]\nmax_loaded = 1\n");
  CHECK_MESSAGE(e.find("models.max_loaded") != std::string::npos, e);
  CHECK_MESSAGE(e.find("2 models load at start") != std::string::npos, e);
  e = parse_error_message(std::string{minimal} + "[models]\nload_timeout_ms = 10\n");
  CHECK_MESSAGE(e.find("models.load_timeout_ms") != std::string::npos, e);
  e = parse_error_message(std::string{minimal} + "[models]\nmax_resident = 1\n");
  CHECK_MESSAGE(e.find("max_resident") != std::string::npos, e);
}
