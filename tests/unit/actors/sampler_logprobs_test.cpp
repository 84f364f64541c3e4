#include "actors/sampler.hpp"

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <set>
#include <vector>

using namespace kvlane;
using actors::log_probabilities;
using actors::max_top_logprobs;
using actors::min_logprob;
using actors::sampler;
using actors::sampling_params;
using actors::token_logprobs;
using backends::token_id;

namespace {

sampling_params logprob_params(float temperature, std::uint32_t top, std::uint64_t seed = 7) {
  sampling_params p;
  p.temperature = temperature;
  p.seed = seed;
  p.logprobs = true;
  p.top_logprobs = top;
  return p;
}

/// A row of max_top_logprobs logits with distinct, irregular values.
std::vector<float> irregular_row() {
  std::vector<float> row(max_top_logprobs);
  for (std::size_t i = 0; i < row.size(); ++i)
    row[i] = std::sin(static_cast<float>(i) * 1.7f) * 4.0f + static_cast<float>(i % 3);
  return row;
}

bool ranked(const token_logprobs& lp) {
  const auto top = lp.alternatives();
  for (std::size_t i = 1; i < top.size(); ++i)
    if (top[i - 1].logprob < top[i].logprob
        || (top[i - 1].logprob == top[i].logprob && top[i - 1].token > top[i].token))
      return false;
  return true;
}

} // namespace

TEST_CASE("sampler logprobs: the probabilities of the whole vocabulary sum to one") {
  const auto row = irregular_row();
  for (const float temperature : {0.0f, 0.3f, 1.0f, 2.5f}) {
    CAPTURE(temperature);
    sampler sut{logprob_params(temperature, max_top_logprobs)};
    const auto tok = sut.sample(row);
    const auto& lp = sut.last_logprobs();
    REQUIRE(lp.top_count == row.size()); // every token listed
    double total = 0.0;
    std::set<token_id> seen;
    for (const auto& c : lp.alternatives()) {
      CHECK(c.logprob <= 0.0f);
      total += std::exp(static_cast<double>(c.logprob));
      seen.insert(c.token);
    }
    CHECK(seen.size() == row.size());
    CHECK(total == doctest::Approx(1.0).epsilon(1e-5));
    CHECK(lp.chosen.token == tok);
  }
}

TEST_CASE("sampler logprobs: the distribution is the tempered softmax before top-k and top-p") {
  const std::vector<float> row{2.0f, 1.0f, 0.0f, -1.0f};
  auto p = logprob_params(0.5f, 4);
  p.top_k = 1; // truncation must not change the reported distribution
  p.top_p = 0.1f;
  sampler sut{p};
  CHECK(sut.sample(row) == 0);
  const auto& lp = sut.last_logprobs();
  double z = 0.0;
  for (const float x : row)
    z += std::exp(x / 0.5);
  REQUIRE(lp.top_count == 4);
  for (std::size_t i = 0; i < 4; ++i) {
    CAPTURE(i);
    CHECK(lp.top[i].token == i);
    CHECK(lp.top[i].logprob == doctest::Approx(row[i] / 0.5 - std::log(z)).epsilon(1e-5));
  }
}

TEST_CASE("sampler logprobs: greedy reports the chosen token as the first alternative") {
  const auto row = irregular_row();
  sampler sut{logprob_params(0.0f, 5)};
  const auto tok = sut.sample(row);
  const auto& lp = sut.last_logprobs();
  REQUIRE(lp.top_count == 5);
  CHECK(lp.top[0].token == tok);
  CHECK(lp.chosen.token == tok);
  CHECK(lp.chosen.logprob == lp.top[0].logprob);
  CHECK(tok == static_cast<token_id>(std::max_element(row.begin(), row.end()) - row.begin()));
}

TEST_CASE("sampler logprobs: the alternatives are the N most likely, sorted") {
  std::vector<float> row(1000);
  for (std::size_t i = 0; i < row.size(); ++i)
    row[i] = static_cast<float>((i * 7919) % 1000) / 100.0f;
  row[10] = row[20]; // a tie: the lower id ranks first
  for (const std::uint32_t n : {0u, 1u, 3u, max_top_logprobs}) {
    CAPTURE(n);
    sampler sut{logprob_params(0.8f, n)};
    (void)sut.sample(row);
    const auto& lp = sut.last_logprobs();
    REQUIRE(lp.top_count == n);
    CHECK(ranked(lp));
    std::vector<token_id> expect(row.size());
    for (std::size_t i = 0; i < row.size(); ++i)
      expect[i] = static_cast<token_id>(i);
    std::stable_sort(expect.begin(), expect.end(),
                     [&](token_id a, token_id b) { return row[a] > row[b]; });
    for (std::uint32_t j = 0; j < n; ++j)
      CHECK(lp.top[j].token == expect[j]);
  }
}

TEST_CASE("sampler logprobs: the sampled token and its logprob are deterministic for a seed") {
  const auto row = irregular_row();
  sampler a{logprob_params(1.0f, 3, 42)};
  sampler b{logprob_params(1.0f, 3, 42)};
  for (int i = 0; i < 50; ++i) {
    const auto ta = a.sample(row);
    const auto tb = b.sample(row);
    REQUIRE(ta == tb);
    const auto& la = a.last_logprobs();
    const auto& lb = b.last_logprobs();
    CHECK(la.chosen.token == ta);
    CHECK(la.chosen.logprob == lb.chosen.logprob);
    CHECK(la.chosen.logprob <= la.top[0].logprob);
    for (std::uint32_t j = 0; j < la.top_count; ++j)
      CHECK(la.top[j].token == lb.top[j].token);
  }
}

TEST_CASE("sampler logprobs: penalties shift the reported distribution") {
  const std::vector<float> row{1.0f, 1.0f, 0.0f};
  auto p = logprob_params(0.0f, 3);
  p.presence_penalty = 2.0f;
  sampler sut{p};
  CHECK(sut.sample(row) == 0);
  CHECK(sut.last_logprobs().chosen.logprob == doctest::Approx(sut.last_logprobs().top[1].logprob));
  CHECK(sut.sample(row) == 1); // token 0 lost 2 nats
  const auto& lp = sut.last_logprobs();
  CHECK(lp.top[0].token == 1);
  CHECK(lp.top[2].token == 0);
  CHECK(lp.top[0].logprob - lp.top[2].logprob == doctest::Approx(2.0f));
}

TEST_CASE("sampler logprobs: impossible tokens report min_logprob and are never alternatives") {
  constexpr float qnan = std::numeric_limits<float>::quiet_NaN();
  constexpr float inf = std::numeric_limits<float>::infinity();
  const std::vector<float> row{qnan, 0.0f, -inf, 0.0f};
  const auto lp = log_probabilities(row, 1.0f, 0, 4);
  CHECK(lp.chosen.logprob == min_logprob);
  REQUIRE(lp.top_count == 2);
  CHECK(lp.top[0].token == 1);
  CHECK(lp.top[1].token == 3);
  CHECK(lp.top[0].logprob == doctest::Approx(std::log(0.5)));
  const auto dead = log_probabilities(std::vector<float>{-inf, qnan}, 1.0f, 0, 2);
  CHECK(dead.top_count == 0);
  CHECK(dead.chosen.logprob == min_logprob);
}

TEST_CASE("sampler logprobs: validate bounds top_logprobs and ties it to logprobs") {
  auto p = logprob_params(1.0f, max_top_logprobs);
  CHECK(validate(p, 100, 1024).has_value());
  p.top_logprobs = max_top_logprobs + 1;
  const auto over = validate(p, 100, 1024);
  REQUIRE_FALSE(over.has_value());
  CHECK(over.error().find("top_logprobs") != std::string::npos);
  p.top_logprobs = 2;
  p.logprobs = false;
  const auto alone = validate(p, 100, 1024);
  REQUIRE_FALSE(alone.has_value());
  CHECK(alone.error().find("top_logprobs") != std::string::npos);
}
