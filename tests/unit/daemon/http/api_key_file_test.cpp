#include "daemon/http/server.hpp"

#include <doctest/doctest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <unistd.h>

using kvlane::daemon::http::read_api_key_file;

namespace {

std::string write_temp(std::string_view name, std::string_view content) {
  const auto path = (std::filesystem::temp_directory_path()
                     / ("kvlane-api-key-test-" + std::to_string(::getpid()) + "-" + std::string(name)))
                      .string();
  std::ofstream{path} << content;
  return path;
}

} // namespace

TEST_CASE("read_api_key_file: the key is the first line without surrounding whitespace") {
  const auto path = write_temp("ok", "  sk-local-123 \r\nsecond line\n");
  const auto sut = read_api_key_file(path);
  std::remove(path.c_str());
  REQUIRE(sut.has_value());
  CHECK(*sut == "sk-local-123");
}

TEST_CASE("read_api_key_file: an empty or missing file is an error naming the key") {
  const auto path = write_temp("empty", "\n");
  const auto empty = read_api_key_file(path);
  std::remove(path.c_str());
  REQUIRE_FALSE(empty.has_value());
  CHECK(empty.error().find("http.api_key_file") != std::string::npos);
  const auto missing = read_api_key_file("/nonexistent/kvlane-key");
  REQUIRE_FALSE(missing.has_value());
  CHECK(missing.error().find("http.api_key_file") != std::string::npos);
  CHECK(missing.error().find("/nonexistent/kvlane-key") != std::string::npos);
}
