// The sampler's token mask: masked tokens are never drawn, whatever the sampling knobs; a row
// whose allowed tokens the model rules out gives the lowest allowed token.
#include "actors/sampler.hpp"

#include <doctest/doctest.h>

#include <algorithm>
#include <limits>
#include <vector>

using namespace kvlane;
using actors::sampler;
using actors::sampling_params;

namespace {

std::vector<std::uint64_t> mask_of(std::size_t n, std::initializer_list<std::uint32_t> ids) {
  std::vector<std::uint64_t> bits((n + 63) / 64);
  for (auto id : ids)
    bits[id >> 6] |= std::uint64_t{1} << (id & 63);
  return bits;
}

std::vector<float> row(std::size_t n) {
  std::vector<float> r(n);
  for (std::size_t i = 0; i < n; ++i)
    r[i] = static_cast<float>((i * 37) % 11) - 5.0f;
  return r;
}

} // namespace

TEST_CASE("sampler: a masked token is never drawn, greedy or sampled, with penalties and "
          "top-k/top-p") {
  const auto logits = row(300);
  const auto allowed = mask_of(300, {3, 70, 71, 150, 299});
  for (float temperature : {0.0f, 0.7f, 2.0f}) {
    for (std::uint32_t top_k : {0u, 2u, 100u}) {
      sampling_params p;
      p.temperature = temperature;
      p.top_k = top_k;
      p.top_p = 0.9f;
      p.seed = 11;
      p.presence_penalty = 0.5f;
      sampler sut{p};
      for (int i = 0; i < 200; ++i) {
        const auto t = sut.sample(logits, allowed);
        CAPTURE(temperature);
        CAPTURE(top_k);
        REQUIRE((t == 3 || t == 70 || t == 71 || t == 150 || t == 299));
      }
    }
  }
  // Without the mask, greedy picks the row's best, which the mask excludes.
  sampler greedy{sampling_params{}};
  const auto best = greedy.sample(logits);
  CHECK(best != 3);
  CHECK(sampler{sampling_params{}}.sample(logits, allowed) != best);
}

TEST_CASE("sampler: greedy with a mask is the best allowed token, logprobs are over the allowed "
          "tokens") {
  std::vector<float> logits{5.0f, 1.0f, 2.0f, 2.0f, 9.0f};
  sampling_params p;
  p.logprobs = true;
  p.top_logprobs = 3;
  sampler sut{p};
  const auto t = sut.sample(logits, mask_of(5, {1, 2, 3}));
  CHECK(t == 2); // 2 and 3 tie: the lower id
  const auto& lp = sut.last_logprobs();
  CHECK(lp.top_count == 3);
  for (auto& alt : lp.alternatives())
    CHECK((alt.token >= 1 && alt.token <= 3));
  CHECK(lp.chosen.logprob > -1.2f); // log(e^2 / (e + 2 e^2)) = -0.82: the mass is the allowed tokens'
}

TEST_CASE("sampler: when only tokens the model rules out are allowed, the lowest allowed one is "
          "returned with one draw") {
  const float ninf = -std::numeric_limits<float>::infinity();
  std::vector<float> logits{1.0f, 2.0f, ninf, std::numeric_limits<float>::quiet_NaN(), ninf};
  for (float temperature : {0.0f, 1.0f}) {
    sampling_params p;
    p.temperature = temperature;
    sampler sut{p};
    CHECK(sut.sample(logits, mask_of(5, {4, 2})) == 2);
    CHECK(sut.sample(logits, mask_of(5, {3})) == 3);
    CHECK(sut.draws() == (temperature > 0 ? 2u : 0u));
  }
}

TEST_CASE("sampler: token_limit still bounds a masked row") {
  std::vector<float> logits{0.0f, 1.0f, 2.0f, 50.0f};
  sampling_params p;
  p.token_limit = 3;
  sampler sut{p};
  CHECK(sut.sample(logits, mask_of(4, {0, 1, 3})) == 1);
}

TEST_CASE("sampler: greedy with a mask gives the same token without copying the row as with "
          "logprobs on (the masked copy)") {
  const float ninf = -std::numeric_limits<float>::infinity();
  std::uint64_t x = 7;
  auto next = [&] { x = x * 6364136223846793005ull + 1442695040888963407ull; return x >> 33; };
  for (int round = 0; round < 300; ++round) {
    const std::size_t n = 1 + next() % 400;
    std::vector<float> logits(n);
    for (auto& v : logits) {
      const auto r = next() % 20;
      v = r == 0 ? ninf : r == 1 ? std::numeric_limits<float>::quiet_NaN()
                                 : static_cast<float>(next() % 7); // many ties
    }
    std::vector<std::uint64_t> bits((n + 63) / 64);
    for (std::size_t i = 0; i < n; ++i)
      if (next() % 3 == 0)
        bits[i >> 6] |= std::uint64_t{1} << (i & 63);
    if (std::all_of(bits.begin(), bits.end(), [](auto w) { return w == 0; }))
      bits[0] |= 1;
    sampling_params fast;
    sampling_params copied;
    copied.logprobs = true;
    CAPTURE(round);
    CHECK(sampler{fast}.sample(logits, bits) == sampler{copied}.sample(logits, bits));
  }
}
