// key_ring: an API key names one identity (its admission unit, round-robin unit and reuse
// scope); [http] api_key is the identity "default", and so is a keyless API.
#include "daemon/http/identity.hpp"

#include "actors/scheduler.hpp"

#include <doctest/doctest.h>

using namespace kvlane::daemon;
using namespace kvlane::daemon::http;

namespace {

http_key key(std::string name, std::string value) {
  http_key k;
  k.name = std::move(name);
  k.key = std::move(value);
  return k;
}

} // namespace

TEST_CASE("http identity: without any key every request is the identity default") {
  const auto sut = key_ring::create("", {});
  REQUIRE(sut);
  CHECK_FALSE(sut->keyed());
  for (const std::string_view header : {"", "Bearer whatever", "Basic Zm9vOmJhcg=="}) {
    const auto* who = sut->authenticate(header);
    REQUIRE(who != nullptr);
    CHECK(who->name == "default");
    CHECK(who->client == "http:default");
    CHECK(who->owner == kvlane::actors::http_owner);
  }
}

TEST_CASE("http identity: each key names its own identity, a wrong or missing key none") {
  auto bob = key("bob", "sk-bob");
  bob.max_requests = 2;
  bob.batch_only = true;
  const auto sut = key_ring::create("sk-shared", {key("alice", "sk-alice"), bob});
  REQUIRE(sut);
  CHECK(sut->keyed());
  const auto* d = sut->authenticate("Bearer sk-shared");
  const auto* a = sut->authenticate("bearer  sk-alice ");
  const auto* b = sut->authenticate("Bearer sk-bob");
  REQUIRE(d != nullptr);
  REQUIRE(a != nullptr);
  REQUIRE(b != nullptr);
  CHECK(d->name == "default");
  CHECK(a->name == "alice");
  CHECK(a->client == "http:alice");
  CHECK(b->name == "bob");
  // Three principals and three reuse scopes, none of them a uid (< 2^32) or the shared one.
  CHECK(d->principal != a->principal);
  CHECK(a->principal != b->principal);
  CHECK(d->principal != b->principal);
  for (const auto* who : {d, a, b}) {
    CHECK(who->principal >= kvlane::actors::http_owner);
    CHECK(who->owner == who->principal);
    CHECK(who->owner != kvlane::actors::shared_owner);
  }
  CHECK(a->max_requests == 0); // [clients] max_requests_per_user
  CHECK(a->limit_key == "[clients] max_requests_per_user");
  CHECK_FALSE(a->batch_only);
  CHECK(b->max_requests == 2);
  CHECK(b->limit_key == "http.keys[1].max_requests");
  CHECK(b->batch_only);

  for (const std::string_view header :
       {"", "Bearer", "Bearer ", "Bearer sk-alic", "Bearer sk-alice2", "Basic sk-alice", "sk-alice"}) {
    CAPTURE(header);
    CHECK(sut->authenticate(header) == nullptr);
  }
}

TEST_CASE("http identity: keys alone leave no default identity") {
  const auto sut = key_ring::create("", {key("alice", "sk-alice")});
  REQUIRE(sut);
  CHECK(sut->identities().size() == 1);
  CHECK(sut->authenticate("Bearer sk-alice") != nullptr);
  CHECK(sut->authenticate("Bearer ") == nullptr);
  CHECK(sut->authenticate("") == nullptr);
}

TEST_CASE("http identity: a key with scope all reuses in the shared scope, under its own admission") {
  auto a = key("a", "ka");
  a.share_all = true;
  const auto sut = key_ring::create("", {a, key("b", "kb")});
  REQUIRE(sut);
  const auto* who = sut->authenticate("Bearer ka");
  REQUIRE(who != nullptr);
  CHECK(who->owner == kvlane::actors::shared_owner);
  CHECK(who->principal != kvlane::actors::shared_owner);
  CHECK(sut->authenticate("Bearer kb")->owner != kvlane::actors::shared_owner);
}

TEST_CASE("http identity: a key equal to api_key (read from api_key_file) is an error naming both") {
  const auto sut = key_ring::create("sk-dup", {key("alice", "other"), key("bob", "sk-dup")});
  REQUIRE_FALSE(sut);
  CHECK(sut.error().find("http.keys[1] ('bob')") != std::string::npos);
  CHECK(sut.error().find("http.api_key") != std::string::npos);
  CHECK(sut.error().find("sk-dup") == std::string::npos);
}
