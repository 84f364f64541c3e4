// The swap-or-recompute cost model: what it learns from observed times, and
// fixed figures that replace the measurement.
#include "actors/cost_model.hpp"

#include <doctest/doctest.h>

using kvlane::actors::cost_figures;
using kvlane::actors::cost_model;

namespace {

constexpr std::uint64_t mib = 1u << 20;

} // namespace

TEST_CASE("cost_model: fits base and per-token cost from steps of different sizes") {
  cost_model m{0.5};
  for (int i = 0; i < 20; ++i) {
    m.observe_step(1, 31.0 + 1.7);
    m.observe_step(128, 31.0 + 1.7 * 128);
  }
  REQUIRE(m.step_per_token_ms().has_value());
  CHECK(*m.step_per_token_ms() == doctest::Approx(1.7));
  CHECK(*m.step_base_ms() == doctest::Approx(31.0));
  CHECK(*m.recompute_ms(100) == doctest::Approx(170.0));
}

TEST_CASE("cost_model: the per-token cost is unknown until step sizes differ, then kept through "
          "a long run of alike steps while the base follows their time") {
  cost_model m{0.2};
  for (int i = 0; i < 50; ++i)
    m.observe_step(16, 31.0 + 1.7 * 16);
  CHECK_FALSE(m.step_per_token_ms().has_value()); // one size only: not identifiable
  CHECK_FALSE(m.step_base_ms().has_value());
  for (int i = 0; i < 20; ++i) {
    m.observe_step(1, 31.0 + 1.7);
    m.observe_step(128, 31.0 + 1.7 * 128);
  }
  REQUIRE(m.step_per_token_ms().has_value());
  // 500 steps of 16 rows: the spread of the sizes above has decayed below what
  // identifies a slope (0.8^500).
  for (int i = 0; i < 500; ++i)
    m.observe_step(16, 31.0 + 1.7 * 16);
  REQUIRE(m.step_per_token_ms().has_value());
  CHECK(*m.step_per_token_ms() == doctest::Approx(1.7));
  REQUIRE(m.step_base_ms().has_value());
  CHECK(*m.step_base_ms() == doctest::Approx(31.0));
  // The steps get 10 ms slower: a step of 16 tokens is predicted at its new time.
  for (int i = 0; i < 200; ++i)
    m.observe_step(16, 41.0 + 1.7 * 16);
  CHECK(*m.step_base_ms() + 16 * *m.step_per_token_ms() == doctest::Approx(41.0 + 1.7 * 16));
}

TEST_CASE("cost_model: unknown figures never prefer recompute, so a swap measures them") {
  cost_model m;
  CHECK_FALSE(m.prefer_recompute(4000, 64 * mib, false));
  m.observe_step(1, 32.7);
  m.observe_step(1, 32.7); // no spread in token counts: the slope is unknown
  CHECK_FALSE(m.step_per_token_ms().has_value());
  CHECK_FALSE(m.prefer_recompute(4000, 64 * mib, false));
}

TEST_CASE("cost_model: recompute wins only below 0.9 of the swap, with the dump when it is exposed") {
  cost_model m{0.5};
  m.observe_step(1, 1.0);
  m.observe_step(11, 2.0); // 0.1 ms per token
  m.observe_load(64 * mib, 17.0);
  m.observe_dump(64 * mib, 45.0);
  CHECK(*m.swap_ms(64 * mib, false) == doctest::Approx(17.0));
  CHECK(*m.swap_ms(64 * mib, true) == doctest::Approx(62.0));
  CHECK(m.prefer_recompute(180, 64 * mib, false));        // 18 ms <= 17 / 0.9
  CHECK_FALSE(m.prefer_recompute(200, 64 * mib, false));  // 20 ms > 18.9 ms
  CHECK(m.prefer_recompute(600, 64 * mib, true));         // 60 ms <= 62 / 0.9
}

TEST_CASE("cost_model: fixed figures decide and observations are ignored until unfixed") {
  cost_model m{0.5};
  m.observe_step(1, 1.0);
  m.observe_step(11, 2.0);
  m.observe_load(mib, 1000.0); // measured: loads look hopeless
  CHECK(m.prefer_recompute(100, mib, false));

  m.fix(cost_figures{31.0, 1.7, 0.7, 0.265});
  CHECK(*m.step_base_ms() == doctest::Approx(31.0));
  CHECK(*m.step_per_token_ms() == doctest::Approx(1.7));
  CHECK(*m.load_ms(64 * mib) == doctest::Approx(16.96));
  CHECK(*m.dump_ms(64 * mib) == doctest::Approx(44.8));
  CHECK_FALSE(m.prefer_recompute(100, mib, false)); // 170 ms against 0.265 ms
  m.observe_load(mib, 5000.0);
  m.observe_step(1, 500.0);
  m.observe_step(2, 900.0);
  CHECK(*m.step_per_token_ms() == doctest::Approx(1.7));
  CHECK(*m.load_ms(mib) == doctest::Approx(0.265));

  m.fix(std::nullopt); // measured again, from what was learned before the fix
  CHECK(*m.load_ms(mib) == doctest::Approx(1000.0));
  CHECK(m.prefer_recompute(100, mib, false));
}
