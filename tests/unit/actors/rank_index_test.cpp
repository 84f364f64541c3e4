// The incremental rank index against the policy's full sort: same order after
// any sequence of inserts, erases and re-keys, in every rank order.
#include "actors/rank_index.hpp"

#include <doctest/doctest.h>

#include <algorithm>
#include <map>
#include <random>
#include <string>
#include <vector>

using namespace kvlane;
using actors::mlfq_knobs;
using actors::mlfq_policy;
using actors::mlfq_position;
using actors::priority_class;
using actors::rank_index;
using actors::rank_order;
using actors::seq_id;

namespace {

constexpr std::uint32_t chunk = 32;

struct live_sequence {
  std::string client;
  mlfq_position position;
};

/// What `mlfq_policy::rank` makes of `seqs`, as ids best first.
std::vector<seq_id> policy_order(const mlfq_policy& policy,
                                 const std::map<seq_id, live_sequence>& seqs) {
  std::vector<seq_id> ids;
  std::vector<actors::rank_entry> entries;
  for (const auto& [id, s] : seqs) {
    ids.push_back(id);
    entries.push_back({&s.position, s.client});
  }
  std::vector<seq_id> out;
  for (auto i : policy.rank(entries))
    out.push_back(ids[i]);
  return out;
}

/// The policy and the index side by side, changed through the same calls.
class model {
public:
  explicit model(rank_order order, mlfq_knobs knobs = {2, 4, 0})
    : policy_({order, false, chunk}, knobs), sut_(order) {}

  seq_id submit(priority_class cls, std::uint32_t prompt_len, std::string client) {
    const auto id = next_id_++;
    auto& s = seqs_[id];
    s.client = std::move(client);
    s.position = policy_.enter(cls, prompt_len);
    REQUIRE(sut_.insert(id, s.position, s.client));
    return id;
  }

  void end(seq_id id) {
    seqs_.erase(id);
    REQUIRE(sut_.erase(id));
  }

  void run_step(seq_id id) {
    policy_.charge_step(seqs_.at(id).position);
    REQUIRE(sut_.update(id, seqs_.at(id).position));
  }

  /// What aging does: back to level 0, keeping the turn, no longer demoted.
  void lift(seq_id id) {
    auto& p = seqs_.at(id).position;
    mlfq_policy::return_to_top(p);
    REQUIRE(sut_.update(id, p));
  }

  /// Goodput: it can no longer meet its objective.
  void demote(seq_id id) {
    auto& p = seqs_.at(id).position;
    p.demoted = true;
    REQUIRE(sut_.update(id, p));
  }

  std::vector<seq_id> expected() const { return policy_order(policy_, seqs_); }
  const rank_index& sut() const { return sut_; }
  const std::map<seq_id, live_sequence>& seqs() const { return seqs_; }

private:
  mlfq_policy policy_;
  rank_index sut_;
  std::map<seq_id, live_sequence> seqs_;
  seq_id next_id_ = 1;
};

std::vector<seq_id> all_of(const rank_index& index) { return index.best(index.size()); }

/// Random submits, ends, steps and lifts; after each the index must agree
/// with the policy, as a whole, as a prefix and for a random subset.
void check_random_history(rank_order order, std::uint64_t seed) {
  CAPTURE(seed);
  CAPTURE(static_cast<int>(order));
  std::mt19937_64 rng{seed};
  auto pick = [&](std::size_t n) {
    return std::uniform_int_distribution<std::size_t>{0, n - 1}(rng);
  };
  model m{order, {1, 4, 0}};
  const std::vector<std::string> clients{"a", "b", "c", "d", "e"};
  for (int op = 0; op < 600; ++op) {
    const auto what = pick(10);
    const auto& seqs = m.seqs();
    if (seqs.empty() || what < 4) {
      const auto cls = pick(3) == 0 ? priority_class::interactive : priority_class::batch;
      m.submit(cls, static_cast<std::uint32_t>(1 + pick(400)), clients[pick(clients.size())]);
    } else {
      auto it = std::next(seqs.begin(), static_cast<std::ptrdiff_t>(pick(seqs.size())));
      const auto id = it->first;
      if (what < 6)
        m.end(id);
      else if (what < 8)
        m.run_step(id);
      else if (what < 9 && order == rank_order::mlfq)
        m.demote(id);
      else
        m.lift(id);
    }
    const auto expected = m.expected();
    REQUIRE(all_of(m.sut()) == expected);
    const auto n = pick(expected.size() + 1);
    REQUIRE(m.sut().best(n) == std::vector<seq_id>(expected.begin(), expected.begin() + n));
    std::vector<seq_id> subset;
    for (auto id : expected)
      if (pick(4) == 0)
        subset.push_back(id);
    auto shuffled = subset;
    std::shuffle(shuffled.begin(), shuffled.end(), rng);
    m.sut().sort(shuffled);
    REQUIRE(shuffled == subset);
  }
}

} // namespace

TEST_CASE("rank_index: agrees with mlfq_policy rank after random inserts, erases and re-keys") {
  for (std::uint64_t seed = 1; seed <= 8; ++seed)
    check_random_history(rank_order::mlfq, seed);
}

TEST_CASE("rank_index: agrees with mlfq_policy rank in the fcfs and priority orders") {
  for (std::uint64_t seed = 1; seed <= 4; ++seed) {
    check_random_history(rank_order::arrival, seed);
    check_random_history(rank_order::priority, seed);
  }
}

TEST_CASE("rank_index: interleaves clients round-robin in the order of their earliest turn") {
  model m{rank_order::mlfq};
  const auto a1 = m.submit(priority_class::batch, 10, "a");
  const auto a2 = m.submit(priority_class::batch, 10, "a");
  const auto a3 = m.submit(priority_class::batch, 10, "a");
  const auto b1 = m.submit(priority_class::batch, 10, "b");
  const auto c1 = m.submit(priority_class::batch, 10, "c");
  const auto c2 = m.submit(priority_class::batch, 10, "c");
  CHECK(all_of(m.sut()) == std::vector<seq_id>{a1, b1, c1, a2, c2, a3});
  CHECK(all_of(m.sut()) == m.expected());
}

TEST_CASE("rank_index: a client whose first member leaves moves back to its next member's turn") {
  model m{rank_order::mlfq};
  const auto a1 = m.submit(priority_class::batch, 10, "a");
  const auto b1 = m.submit(priority_class::batch, 10, "b");
  const auto a2 = m.submit(priority_class::batch, 10, "a");
  const auto b2 = m.submit(priority_class::batch, 10, "b");
  m.end(a1);
  CHECK(all_of(m.sut()) == std::vector<seq_id>{b1, a2, b2});
  CHECK(all_of(m.sut()) == m.expected());
}

TEST_CASE("rank_index: an aged sequence returns to level 0 with its old turn and leads its "
          "client there") {
  model m{rank_order::mlfq, {1, 4, 0}};
  const auto old = m.submit(priority_class::batch, 10, "a");
  m.run_step(old); // quantum of 1 step: drops to level 1 with a new turn
  const auto b1 = m.submit(priority_class::batch, 10, "b");
  const auto a1 = m.submit(priority_class::batch, 10, "a");
  CHECK(all_of(m.sut()) == std::vector<seq_id>{b1, a1, old});
  m.lift(old); // keeps turn 2, the earliest at level 0: client a now goes first there
  CHECK(all_of(m.sut()) == m.expected());
  CHECK(all_of(m.sut()) == std::vector<seq_id>{old, b1, a1});
}

TEST_CASE("rank_index: interactive ranks before batch and a lower level before a higher one") {
  model m{rank_order::mlfq, {2, 4, 0}};
  const auto batch = m.submit(priority_class::batch, 10, "c");
  const auto long_prompt = m.submit(priority_class::interactive, 500, "c");
  const auto short_prompt = m.submit(priority_class::interactive, 10, "c");
  CHECK(all_of(m.sut()) == std::vector<seq_id>{short_prompt, long_prompt, batch});
  CHECK(all_of(m.sut()) == m.expected());
}

TEST_CASE("rank_index: a demoted sequence ranks after every undemoted one of its class, by turn "
          "whatever its level, and before the class below; aging lifts it back") {
  model m{rank_order::mlfq, {2, 4, 0}};
  const auto early_long = m.submit(priority_class::interactive, 500, "a"); // skip-joins level 3
  const auto early_short = m.submit(priority_class::interactive, 10, "b");
  const auto late_long = m.submit(priority_class::interactive, 500, "c");
  const auto late_short = m.submit(priority_class::interactive, 10, "d");
  const auto batch = m.submit(priority_class::batch, 10, "e");
  m.demote(late_short);
  m.demote(early_long);
  CHECK(all_of(m.sut()) == std::vector<seq_id>{early_short, late_long, early_long, late_short, batch});
  CHECK(all_of(m.sut()) == m.expected());
  m.lift(late_short);
  CHECK(all_of(m.sut()) == std::vector<seq_id>{early_short, late_short, late_long, early_long, batch});
  CHECK(all_of(m.sut()) == m.expected());
}

TEST_CASE("rank_index: refuses a second insert and ignores unknown ids") {
  rank_index sut;
  mlfq_position p;
  p.turn = 1;
  CHECK(sut.insert(7, p, "a"));
  CHECK_FALSE(sut.insert(7, p, "b"));
  CHECK_FALSE(sut.erase(8));
  CHECK_FALSE(sut.update(8, p));
  CHECK(sut.update(7, p)); // nothing changed: stays
  CHECK(sut.size() == 1);
  CHECK(sut.erase(7));
  CHECK(sut.empty());
  CHECK(sut.best(3).empty());
}

TEST_CASE("rank_index: a walk stops where the visitor says") {
  model m{rank_order::mlfq};
  for (int i = 0; i < 20; ++i)
    m.submit(priority_class::batch, 10, i % 2 ? "a" : "b");
  std::vector<seq_id> seen;
  m.sut().walk([&](seq_id id) {
    seen.push_back(id);
    return seen.size() < 5;
  });
  const auto expected = m.expected();
  CHECK(seen == std::vector<seq_id>(expected.begin(), expected.begin() + 5));
}
