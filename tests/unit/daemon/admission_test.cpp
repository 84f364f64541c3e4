// admission: apps (by uid) and HTTP identities (by principal) pass the same limits; each
// user has its own live-request limit, max_live_sequences bounds them all together.
#include "daemon/admission.hpp"

#include <doctest/doctest.h>

#include <string>

using namespace kvlane::daemon;

namespace {

constexpr std::uint64_t alice = (std::uint64_t{1} << 32) + 1;
constexpr std::uint64_t bob = (std::uint64_t{1} << 32) + 2;

admission_limits limits(std::uint32_t per_user, std::uint32_t live) {
  admission_limits l;
  l.max_requests_per_user = per_user;
  l.max_live_sequences = live;
  l.retry_after = std::chrono::milliseconds(1500);
  return l;
}

bool contains(const std::optional<std::string>& s, std::string_view what) {
  return s && s->find(what) != std::string::npos;
}

} // namespace

TEST_CASE("admission: an HTTP identity is held to its own limit while another is admitted") {
  admission sut{limits(100, 100)};
  CHECK_FALSE(sut.admit_request(alice, 2, "HTTP identity 'alice'", "http.keys[0].max_requests"));
  CHECK_FALSE(sut.admit_request(alice, 2, "HTTP identity 'alice'", "http.keys[0].max_requests"));
  const auto busy = sut.admit_request(alice, 2, "HTTP identity 'alice'", "http.keys[0].max_requests");
  CAPTURE(busy);
  CHECK(contains(busy, "HTTP identity 'alice' already has 2 live request(s) "
                       "(http.keys[0].max_requests); retry after 1500 ms"));
  CHECK_FALSE(sut.admit_request(bob, 2, "HTTP identity 'bob'", "k"));
  CHECK(sut.live_requests() == 3);
  sut.release_request(alice);
  CHECK_FALSE(sut.admit_request(alice, 2, "HTTP identity 'alice'", "k"));
}

TEST_CASE("admission: an identity without a limit of its own gets max_requests_per_user") {
  admission sut{limits(1, 100)};
  CHECK_FALSE(sut.admit_request(alice, 0, "HTTP identity 'alice'", "[clients] max_requests_per_user"));
  CHECK(contains(sut.admit_request(alice, 0, "HTTP identity 'alice'", "[clients] max_requests_per_user"),
                 "([clients] max_requests_per_user)"));
}

TEST_CASE("admission: max_live_sequences counts apps and HTTP identities together") {
  admission sut{limits(10, 2)};
  CHECK_FALSE(sut.admit_request(uid_t{1000}));
  CHECK_FALSE(sut.admit_request(alice, 5, "HTTP identity 'alice'", "k"));
  CHECK(contains(sut.admit_request(bob, 5, "HTTP identity 'bob'", "k"),
                 "kvlaned already runs 2 live sequence(s) ([clients] max_live_sequences)"));
  CHECK(contains(sut.admit_request(uid_t{1001}), "max_live_sequences"));
  sut.release_request(uid_t{1000});
  CHECK_FALSE(sut.admit_request(bob, 5, "HTTP identity 'bob'", "k"));
}

TEST_CASE("admission: a uid's refusal still names the uid and the per-user key") {
  admission sut{limits(1, 100)};
  CHECK_FALSE(sut.admit_request(uid_t{42}));
  CHECK(contains(sut.admit_request(uid_t{42}),
                 "uid 42 already has 1 live request(s) ([clients] max_requests_per_user); "
                 "retry after 1500 ms"));
}

TEST_CASE("admission: a ticket releases its request once, when released or destroyed") {
  auto sut = std::make_shared<admission>(limits(10, 10));
  REQUIRE_FALSE(sut->admit_request(alice, 0, "a", "k"));
  REQUIRE_FALSE(sut->admit_request(alice, 0, "a", "k"));
  {
    admission_ticket t{sut, alice};
    admission_ticket moved = std::move(t);
    CHECK(sut->live_requests() == 2);
    moved.release();
    CHECK(sut->live_requests() == 1);
    moved.release(); // idempotent
    CHECK(sut->live_requests() == 1);
  } // t was moved from: nothing more is released
  CHECK(sut->live_requests() == 1);
  {
    admission_ticket t{sut, alice};
  }
  CHECK(sut->live_requests() == 0);
}
