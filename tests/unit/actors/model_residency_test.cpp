#include "actors/model_residency.hpp"

#include <doctest/doctest.h>

#include <vector>

using namespace kvlane::actors;
using namespace std::chrono_literals;
using verdict = room_decision::verdict;
using time_point = resident_view::time_point;

namespace {

const time_point t0 = time_point{} + 1000s;

resident_view loaded(time_point last_used, std::uint32_t users = 0,
                     std::optional<time_point> expires = std::nullopt, bool pinned = false) {
  return {residency::loaded, users, last_used, users == 0 ? expires : std::nullopt, pinned};
}

resident_view unloaded() {
  return {};
}

} // namespace

TEST_CASE("model_residency: an idle model expires at its keep_alive, a model in use never") {
  const std::vector<resident_view> sut{
    loaded(t0, 0, t0 + 5s),              // idle, expires at t0+5s
    loaded(t0, 2),                       // in use: no expiry
    loaded(t0, 0, std::nullopt, true),   // pinned
    unloaded(),
  };
  CHECK(expired_models(sut, t0 + 4s).empty());
  CHECK(expired_models(sut, t0 + 5s) == std::vector<std::size_t>{0});
  CHECK(expired_models(sut, t0 + 1h) == std::vector<std::size_t>{0});
  CHECK(next_expiry(sut, t0) == t0 + 5s);
  CHECK_FALSE(next_expiry(sut, t0 + 5s).has_value()); // due now, nothing later
}

TEST_CASE("model_residency: the earliest of several expiries comes next, expired ones together") {
  const std::vector<resident_view> sut{loaded(t0, 0, t0 + 9s), loaded(t0, 0, t0 + 3s),
                                       loaded(t0, 0, t0 + 6s)};
  CHECK(next_expiry(sut, t0) == t0 + 3s);
  CHECK(next_expiry(sut, t0 + 3s) == t0 + 6s);
  CHECK(expired_models(sut, t0 + 7s) == std::vector<std::size_t>{1, 2});
}

TEST_CASE("model_residency: without a bound, or below it, a load fits") {
  const std::vector<resident_view> sut{loaded(t0), unloaded(), unloaded()};
  CHECK(make_room(sut, 1, 0).what == verdict::fits);
  CHECK(make_room(sut, 1, 2).what == verdict::fits);
}

TEST_CASE("model_residency: at max_loaded the least recently used idle model unloads first") {
  const std::vector<resident_view> sut{loaded(t0 + 2s), loaded(t0 + 1s), loaded(t0 + 3s),
                                       unloaded()};
  const auto d = make_room(sut, 3, 3);
  CHECK(d.what == verdict::unload);
  CHECK(d.victim == 1);
}

TEST_CASE("model_residency: a model in use is never the victim; with none idle the load waits") {
  std::vector<resident_view> sut{loaded(t0, 1), loaded(t0 + 5s), unloaded()};
  auto d = make_room(sut, 2, 2);
  CHECK(d.what == verdict::unload);
  CHECK(d.victim == 1); // more recently used, but model 0 runs a request
  sut[1].users = 1;
  sut[1].expires_at.reset();
  CHECK(make_room(sut, 2, 2).what == verdict::wait);
}

TEST_CASE("model_residency: loading and unloading models count as resident and are no victims") {
  std::vector<resident_view> sut{unloaded(), unloaded(), unloaded()};
  sut[0].state = residency::loading;
  sut[1].state = residency::unloading;
  CHECK(make_room(sut, 2, 2).what == verdict::wait);
  CHECK(make_room(sut, 2, 3).what == verdict::fits);
}

TEST_CASE("model_residency: a pinned idle model goes only after every unpinned idle one") {
  const std::vector<resident_view> sut{loaded(t0, 0, std::nullopt, true), loaded(t0 + 9s),
                                       unloaded()};
  auto d = make_room(sut, 2, 2);
  CHECK(d.what == verdict::unload);
  CHECK(d.victim == 1);
  const std::vector<resident_view> only_pinned{loaded(t0, 0, std::nullopt, true), unloaded()};
  d = make_room(only_pinned, 1, 1);
  CHECK(d.what == verdict::unload);
  CHECK(d.victim == 0);
}
