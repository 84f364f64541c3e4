#include "actors/sampler.hpp"

#include <doctest/doctest.h>

#include <vector>

using namespace kvlane::actors;

TEST_CASE("sampler: a frequency penalty moves greedy decoding off a repeated token") {
  // Token 0 leads by 1.0; each use costs it 0.6 with frequency_penalty 0.6.
  const std::vector<float> logits{2.0f, 1.0f, 0.5f};
  sampling_params p;
  p.frequency_penalty = 0.6f;
  sampler sut{p};
  CHECK(sut.sample(logits) == 0); // no history yet
  CHECK(sut.sample(logits) == 0); // 2.0 - 0.6 = 1.4 still leads
  CHECK(sut.sample(logits) == 1); // 2.0 - 1.2 = 0.8 < 1.0
  CHECK(sut.sample(logits) == 0); // 1.4 vs 1.0 - 0.6 = 0.4
}

TEST_CASE("sampler: a presence penalty costs the same after one use as after many") {
  const std::vector<float> logits{2.0f, 1.5f};
  sampling_params p;
  p.presence_penalty = 0.7f;
  sampler sut{p};
  CHECK(sut.sample(logits) == 0);
  CHECK(sut.sample(logits) == 1); // 1.3 < 1.5
  CHECK(sut.sample(logits) == 0); // both penalised once: 1.3 vs 0.8
}

TEST_CASE("sampler: without penalties the logits are used as they are") {
  const std::vector<float> logits{2.0f, 1.0f};
  sampler sut{sampling_params{}};
  for (int i = 0; i < 5; ++i)
    CHECK(sut.sample(logits) == 0);
}

TEST_CASE("sampler: penalised sampling is deterministic for a seed") {
  std::vector<float> logits(64);
  for (std::size_t i = 0; i < logits.size(); ++i)
    logits[i] = static_cast<float>(i % 7) * 0.3f;
  sampling_params p;
  p.temperature = 0.8f;
  p.seed = 42;
  p.presence_penalty = 0.4f;
  p.frequency_penalty = 0.3f;
  sampler a{p}, b{p};
  for (int i = 0; i < 50; ++i)
    CHECK(a.sample(logits) == b.sample(logits));
}

TEST_CASE("sampler: validate names a penalty outside [-2, 2]") {
  sampling_params p;
  p.presence_penalty = 2.5f;
  auto r = validate(p, 100, 1000);
  REQUIRE_FALSE(r.has_value());
  CHECK(r.error().find("presence_penalty") != std::string::npos);
  p.presence_penalty = 0;
  p.frequency_penalty = -2.1f;
  CHECK_FALSE(validate(p, 100, 1000).has_value());
  p.frequency_penalty = 2.0f;
  CHECK(validate(p, 100, 1000).has_value());
}
