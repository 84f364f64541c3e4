#include "common/model_name.hpp"

#include <doctest/doctest.h>

#include <string>

using kvlane::valid_model_name;

TEST_CASE("model_name: 1 to 64 characters of A-Z a-z 0-9 . _ - are valid") {
  CHECK(valid_model_name("llama-3.2-1b"));
  CHECK(valid_model_name("Tiny_Model.v2"));
  CHECK(valid_model_name("x"));
  CHECK(valid_model_name(std::string(64, 'm')));

  CHECK_FALSE(valid_model_name(""));
  CHECK_FALSE(valid_model_name(std::string(65, 'm')));
  CHECK_FALSE(valid_model_name("a/b"));
  CHECK_FALSE(valid_model_name("a b"));
  CHECK_FALSE(valid_model_name("mod\xC3\xA9le"));
  CHECK_FALSE(valid_model_name(std::string("a\0b", 3)));
}
