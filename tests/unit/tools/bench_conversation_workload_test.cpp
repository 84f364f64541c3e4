#include "tools/bench/conversation_workload.hpp"

#include <doctest/doctest.h>

#include <algorithm>
#include <map>
#include <set>

using namespace kvlane::tools::bench;

namespace {

mooncake_request req(double t, std::uint32_t input, std::vector<std::uint64_t> ids,
                     std::uint32_t output = 10) {
  mooncake_request r;
  r.arrival_s = t;
  r.input_length = input;
  r.output_length = output;
  r.hash_ids = std::move(ids);
  return r;
}

// 200 conversations of 1 to 4 turns each; turn k resends the history (k + 1 blocks).
std::vector<mooncake_request> many_conversations() {
  std::vector<mooncake_request> out;
  std::uint64_t next_block = 1;
  for (int c = 0; c < 200; ++c) {
    std::vector<std::uint64_t> ids{0};
    const int turns = 1 + c % 4;
    for (int k = 0; k < turns; ++k) {
      ids.push_back(next_block++);
      out.push_back(req(c * 10.0 + k, static_cast<std::uint32_t>(512 * ids.size()), ids));
    }
  }
  std::stable_sort(out.begin(), out.end(),
                   [](auto& a, auto& b) { return a.arrival_s < b.arrival_s; });
  return out;
}

} // namespace

TEST_CASE("bench conversations: a conversation is the requests sharing their first non-system block") {
  const std::vector<mooncake_request> trace{req(0, 1000, {0, 5}), req(1, 100, {0}),
                                            req(2, 1500, {0, 5, 6}), req(3, 900, {0, 8}),
                                            req(4, 200, {0})};
  CHECK(conversation_ids(trace) == std::vector<std::uint32_t>{0, 1, 0, 2, 3});
}

TEST_CASE("bench conversations: sampling keeps whole conversations, the same ones for the same seed") {
  const auto trace = many_conversations();
  conversation_options o;
  o.sample = 0.3;
  o.seed = 7;
  auto sut = build_conversation_workload(trace, o);
  auto again = build_conversation_workload(trace, o);
  o.seed = 8;
  auto other = build_conversation_workload(trace, o);

  CHECK(sut.conversations == 200);
  CHECK(sut.kept_conversations > 30);
  CHECK(sut.kept_conversations < 90);
  // Whole: every kept conversation has all its turns (conversation c has 1 + c % 4).
  std::map<std::uint64_t, std::size_t> turns;
  for (auto& r : sut.requests)
    ++turns[r.owner];
  CHECK(turns.size() == sut.kept_conversations);
  for (auto [owner, n] : turns)
    CHECK(n == 1 + (owner - 1) % 4); // owners are conversation ids + 1, in order of appearance
  // Seeded: the same seed keeps the same requests, another seed others.
  REQUIRE(again.requests.size() == sut.requests.size());
  for (std::size_t i = 0; i < sut.requests.size(); ++i)
    CHECK(*again.requests[i].prompt == *sut.requests[i].prompt);
  std::set<std::uint64_t> a, b;
  for (auto& r : sut.requests)
    a.insert(r.owner);
  for (auto& r : other.requests)
    b.insert(r.owner);
  CHECK(a != b);
  // Arrivals start at the first kept request.
  CHECK(sut.requests.front().arrival_s == 0.0);
}

TEST_CASE("bench conversations: the input scale shrinks prompts and blocks alike") {
  const std::vector<mooncake_request> trace{req(0, 1000, {0, 5}), req(9, 1500, {0, 5, 6})};
  conversation_options o;
  o.input_scale = 0.125;
  auto sut = build_conversation_workload(trace, o);
  CHECK(sut.block_tokens == 64);
  REQUIRE(sut.requests.size() == 2);
  CHECK(sut.requests[0].prompt_tokens == 125);
  CHECK(sut.requests[1].prompt_tokens == 188);
  CHECK(sut.requests[0].output_tokens == 10); // outputs are not scaled
  CHECK(sut.requests[1].arrival_s == 9.0);
  // The second turn starts with the first turn's whole prompt.
  const auto& p = *sut.requests[0].prompt;
  const auto& q = *sut.requests[1].prompt;
  CHECK(std::equal(p.begin(), p.end(), q.begin()));
  CHECK(sut.requests[0].owner == sut.requests[1].owner);
}

TEST_CASE("bench conversations: each turn names the previous kept turn of its conversation") {
  const std::vector<mooncake_request> trace{req(0, 1000, {0, 5}), req(1, 100, {0}),
                                            req(2, 1500, {0, 5, 6}), req(3, 900, {0, 8}),
                                            req(4, 2000, {0, 5, 6, 7})};
  const auto sut = build_conversation_workload(trace, {});
  REQUIRE(sut.requests.size() == 5);
  std::vector<std::int32_t> previous;
  for (const auto& r : sut.requests)
    previous.push_back(r.previous_turn);
  // Conversation {0, 5, ...} is requests 0, 2, 4; the others have one turn.
  CHECK(previous == std::vector<std::int32_t>{-1, -1, 0, -1, 2});

  // Sampled: indices point into the kept requests, never at a dropped one.
  const auto trace2 = many_conversations();
  conversation_options o;
  o.sample = 0.3;
  const auto sampled = build_conversation_workload(trace2, o);
  std::size_t linked = 0;
  for (std::size_t i = 0; i < sampled.requests.size(); ++i) {
    const auto p = sampled.requests[i].previous_turn;
    if (p < 0)
      continue;
    ++linked;
    REQUIRE(static_cast<std::size_t>(p) < i);
    CHECK(sampled.requests[static_cast<std::size_t>(p)].conversation
          == sampled.requests[i].conversation);
  }
  // Every conversation's turns after its first are linked.
  CHECK(linked == sampled.requests.size() - sampled.kept_conversations);
}

TEST_CASE("bench conversations: one user per conversation or one for all") {
  const std::vector<mooncake_request> trace{req(0, 600, {0, 5}), req(1, 600, {0, 8})};
  auto per_conversation = build_conversation_workload(trace, {});
  CHECK(per_conversation.requests[0].owner != per_conversation.requests[1].owner);
  conversation_options o;
  o.users = trace_users::one;
  auto one = build_conversation_workload(trace, o);
  CHECK(one.requests[0].owner == one.requests[1].owner);
}

TEST_CASE("bench conversations: achievable reuse on a hand-made trace") {
  // Blocks of 4 tokens. A: [0 1] 8 tokens;
  // B: A's next turn [0 1 2] 11 tokens; C: another conversation [0 3] 6 tokens;
  // D: a branch of A [0 1 4] 12 tokens; E: B again, cut to 9 tokens.
  auto make = [](trace_users users) {
    // Lengths x 128 at input scale 1/128: 4-token blocks.
    const std::vector<mooncake_request> trace{
      req(0, 8 * 128, {0, 1}), req(1, 11 * 128, {0, 1, 2}), req(2, 6 * 128, {0, 3}),
      req(3, 12 * 128, {0, 1, 4}), req(4, 9 * 128, {0, 1, 2})};
    conversation_options o;
    o.input_scale = 1.0 / 128.0;
    o.users = users;
    auto w = build_conversation_workload(trace, o);
    return w.requests;
  };
  auto sut = make(trace_users::conversation);
  REQUIRE(sut.size() == 5);
  CHECK(sut[0].prompt_tokens == 8);
  CHECK(sut[4].prompt_tokens == 9);
  // Per conversation: B reuses A's 8; C nothing; D A's (and B's) 8; E B's 9 less the last.
  CHECK(achievable_reuse(sut, 1) == std::vector<std::uint32_t>{0, 8, 0, 8, 8});
  // Matches shorter than the minimum do not count.
  CHECK(achievable_reuse(sut, 9) == std::vector<std::uint32_t>{0, 0, 0, 0, 0});
  // One user for all: C also reuses the system block (4 tokens) of A.
  auto one = make(trace_users::one);
  CHECK(achievable_reuse(one, 1) == std::vector<std::uint32_t>{0, 8, 4, 8, 8});
  CHECK(achievable_reuse(one, 5) == std::vector<std::uint32_t>{0, 8, 0, 8, 8});
  // A prompt cut shorter (the clamp) only matches what it still sends.
  one[1].prompt_tokens = 6;
  CHECK(achievable_reuse(one, 1) == std::vector<std::uint32_t>{0, 5, 4, 8, 8});
}
