// The sampler's banned tokens: never drawn, whatever their logits, the sampling knobs or a token
// mask say; every other token is drawn as it would be without the ban.
#include "actors/sampler.hpp"

#include <doctest/doctest.h>

#include <vector>

using namespace kvlane;
using actors::sampler;
using actors::sampling_params;

namespace {

constexpr std::size_t vocab = 300;
constexpr backends::token_id favourite = 42; ///< the row's best token, by far

std::vector<float> row() {
  std::vector<float> r(vocab);
  for (std::size_t i = 0; i < vocab; ++i)
    r[i] = static_cast<float>((i * 37) % 11) - 5.0f;
  r[favourite] = 50.0f;
  return r;
}

std::vector<std::uint64_t> mask_of(std::initializer_list<std::uint32_t> ids) {
  std::vector<std::uint64_t> bits((vocab + 63) / 64);
  for (auto id : ids)
    bits[id >> 6] |= std::uint64_t{1} << (id & 63);
  return bits;
}

sampling_params banning(std::vector<backends::token_id> banned) {
  sampling_params p;
  p.banned_tokens = std::move(banned);
  return p;
}

} // namespace

TEST_CASE("sampler: a banned token is never drawn, greedy or sampled, with penalties, logprobs "
          "and top-k/top-p, even when the model all but forces it") {
  const auto logits = row();
  REQUIRE(sampler{sampling_params{}}.sample(logits) == favourite);
  for (float temperature : {0.0f, 0.7f, 2.0f}) {
    for (bool logprobs : {false, true}) {
      for (float penalty : {0.0f, 0.5f}) {
        auto p = banning({favourite, 7});
        p.temperature = temperature;
        p.top_k = temperature > 1.0f ? 3 : 0;
        p.top_p = 0.95f;
        p.seed = 5;
        p.logprobs = logprobs;
        p.presence_penalty = penalty;
        sampler sut{p};
        for (int i = 0; i < 100; ++i) {
          CAPTURE(temperature);
          CAPTURE(logprobs);
          CAPTURE(penalty);
          const auto t = sut.sample(logits);
          REQUIRE(t != favourite);
          REQUIRE(t != 7);
        }
      }
    }
  }
}

TEST_CASE("sampler: greedy with a ban takes the best token that is not banned") {
  auto logits = row();
  logits[200] = 40.0f; // second best
  sampler sut{banning({favourite})};
  CHECK(sut.sample(logits) == 200);
  // The copying path (logprobs) agrees, and reports the banned token as impossible.
  auto p = banning({favourite});
  p.logprobs = true;
  p.top_logprobs = 3;
  sampler with_logprobs{p};
  CHECK(with_logprobs.sample(logits) == 200);
  for (const auto& alt : with_logprobs.last_logprobs().alternatives())
    CHECK(alt.token != favourite);
}

TEST_CASE("sampler: a ban applies inside a token mask too, and a mask of only banned tokens "
          "gives no banned token") {
  const auto logits = row();
  const auto allowed = mask_of({favourite, 3, 150});
  sampler sut{banning({favourite})};
  const auto t = sut.sample(logits, allowed);
  CHECK((t == 3 || t == 150));
  // The greedy path that does not copy the row agrees with the copying one (logprobs).
  auto copying = banning({favourite});
  copying.logprobs = true;
  CHECK(sampler{copying}.sample(logits, allowed) == t);
  // Every allowed token banned: none of them, and the same on both paths.
  const auto only_banned = mask_of({favourite});
  const auto none = sampler{banning({favourite})}.sample(logits, only_banned);
  CHECK(none != favourite);
  CHECK(sampler{copying}.sample(logits, only_banned) == none);
  auto p = banning({favourite});
  p.temperature = 1.0f;
  p.seed = 3;
  sampler sampled{p};
  for (int i = 0; i < 100; ++i) {
    const auto s = sampled.sample(logits, allowed);
    REQUIRE((s == 3 || s == 150));
  }
}

TEST_CASE("sampler: validate bounds banned_tokens by the vocabulary and their count") {
  CHECK(actors::validate(banning({299}), vocab, 512).has_value());
  const auto outside = actors::validate(banning({300}), vocab, 512);
  REQUIRE_FALSE(outside.has_value());
  CHECK(outside.error() == "banned_tokens[0] must be < vocab_size (300), got 300");
  std::vector<backends::token_id> many(actors::max_banned_tokens + 1, 1);
  const auto too_many = actors::validate(banning(many), vocab, 512);
  REQUIRE_FALSE(too_many.has_value());
  CHECK(too_many.error().find("banned_tokens holds 17 entries") != std::string::npos);
}
