#include "tools/bench/bench_profile.hpp"
#include "tools/bench/config_toml.hpp"

#include <doctest/doctest.h>

using namespace kvlane;
using namespace kvlane::tools::bench;

TEST_CASE("bench config_toml: a model's device is written when set and left to the backend's "
          "default when not") {
  auto cfg = builtin_profile();
  REQUIRE(cfg.has_value());
  auto text = config_toml(*cfg);
  REQUIRE_MESSAGE(text.has_value(), (text ? std::string{} : text.error()));
  CHECK(text->find("device = \"") == std::string::npos);

  cfg->models.front().backend.device = "npu:1";
  text = config_toml(*cfg);
  REQUIRE_MESSAGE(text.has_value(), (text ? std::string{} : text.error()));
  auto sut = daemon::parse(*text, "<written>");
  REQUIRE_MESSAGE(sut.has_value(), (sut ? std::string{} : sut.error().message));
  CHECK(sut->models.front().backend.device == "npu:1");
  CHECK(sut->models == cfg->models);
}
