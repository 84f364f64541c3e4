#include "ipc/utf8.hpp"

#include <doctest/doctest.h>

using namespace kvlane::ipc::proto;

TEST_CASE("utf8: utf8_stream holds back split sequences and replaces invalid bytes") {
  utf8_stream sut;
  CHECK(sut.feed("a\xE2\x82") == "a");
  CHECK(sut.feed("\xAC" "b") == "\xE2\x82\xAC" "b");
  CHECK(sut.feed("\x80") == "\xEF\xBF\xBD");
  CHECK(sut.feed("\xF0\x9F") == "");
  CHECK(sut.flush() == "\xEF\xBF\xBD");
  CHECK(valid_utf8("h\xC3\xA9llo"));
  CHECK_FALSE(valid_utf8("\xED\xA0\x80")); // surrogate
  CHECK_FALSE(valid_utf8("\xC0\xAF"));     // overlong
  CHECK(utf8_prefix("a\xC3\xA9", 2) == 1);
}
