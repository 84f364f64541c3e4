#include "daemon/http/access.hpp"

#include <doctest/doctest.h>

using namespace kvlane::daemon::http;

TEST_CASE("access: constant_time_equal compares content and length") {
  CHECK(constant_time_equal("secret", "secret"));
  CHECK_FALSE(constant_time_equal("secreT", "secret"));
  CHECK_FALSE(constant_time_equal("secret1", "secret"));
  CHECK_FALSE(constant_time_equal("secre", "secret"));
  CHECK_FALSE(constant_time_equal("", "secret"));
  CHECK(constant_time_equal("", ""));
}

TEST_CASE("access: bearer_matches wants the Bearer scheme and the exact key") {
  CHECK(bearer_matches("Bearer k-123", "k-123"));
  CHECK(bearer_matches("bearer k-123", "k-123"));
  CHECK(bearer_matches("Bearer  k-123 ", "k-123"));
  CHECK_FALSE(bearer_matches("Bearer k-124", "k-123"));
  CHECK_FALSE(bearer_matches("Basic k-123", "k-123"));
  CHECK_FALSE(bearer_matches("k-123", "k-123"));
  CHECK_FALSE(bearer_matches("", "k-123"));
  CHECK_FALSE(bearer_matches("Bearer ", "k-123"));
}

TEST_CASE("access: only listed origins are allowed, exactly") {
  const std::vector<std::string> allowed{"http://localhost:3000"};
  CHECK(allowed_origin("http://localhost:3000", allowed) == "http://localhost:3000");
  CHECK_FALSE(allowed_origin("http://localhost:3001", allowed));
  CHECK_FALSE(allowed_origin("http://localhost:3000.evil", allowed));
  CHECK_FALSE(allowed_origin("", allowed));
  CHECK_FALSE(allowed_origin("http://localhost:3000", {}));
}

TEST_CASE("access: requested header lists are echoed only when they are plain names") {
  CHECK(valid_header_list("authorization, content-type, x-stainless-os"));
  CHECK_FALSE(valid_header_list("x\r\nSet-Cookie: a=b"));
  CHECK_FALSE(valid_header_list("a:b"));
}
