#include "actors/sequence_table.hpp"

#include "actors/kv_keeper.hpp"

#include <doctest/doctest.h>

#include <numeric>
#include <vector>

using namespace kvlane::actors;
using kvlane::backends::token_id;

namespace {

/// A prompt of 20 tokens whose first reuse block starts at `first`.
std::vector<token_id> prompt(token_id first) {
  std::vector<token_id> t(20);
  std::iota(t.begin(), t.end(), first);
  return t;
}

sequence& add(sequence_table& sut, seq_id id, std::uint64_t turn,
              priority_class cls = priority_class::interactive, token_id head = 1,
              std::uint32_t level = 0) {
  submission s;
  s.id = id;
  s.client = "c" + std::to_string(id);
  s.priority = cls;
  s.prompt = prompt(head);
  auto seq = std::make_unique<sequence>(s);
  seq->position = mlfq_position{cls, level, 0, turn, 0};
  return sut.add(std::move(seq), s.client);
}

std::vector<seq_id> ids_of(const std::vector<sequence*>& seqs) {
  std::vector<seq_id> out;
  for (auto* s : seqs)
    out.push_back(s->id);
  return out;
}

} // namespace

TEST_CASE("sequence_table: counts by state and class follow every change, cancelled sequences "
          "included until they are erased") {
  sequence_table sut{rank_order::mlfq, 4};
  auto& a = add(sut, 1, 1);
  auto& b = add(sut, 2, 2);
  add(sut, 3, 3, priority_class::batch);
  CHECK(sut.count(kv_state::queued) == std::array<std::uint32_t, 2>{2, 1});

  sut.set_state(a, kv_state::resident);
  sut.take_slot(a, 2);
  CHECK(sut.count(kv_state::queued) == std::array<std::uint32_t, 2>{1, 1});
  CHECK(sut.count(kv_state::resident) == std::array<std::uint32_t, 2>{1, 0});
  CHECK(sut.owners()[2] == std::optional<seq_id>{1});

  sut.unrank(b); // cancelled while a lane works on it: still counted
  CHECK(sut.count(kv_state::queued) == std::array<std::uint32_t, 2>{1, 1});
  CHECK(ids_of(sut.best_ranked(10)) == std::vector<seq_id>{1, 3});
  sut.erase(2);
  CHECK(sut.find(2) == nullptr);
  CHECK(sut.count(kv_state::queued) == std::array<std::uint32_t, 2>{0, 1});

  sut.release_slot(a);
  CHECK_FALSE(a.slot.has_value());
  CHECK_FALSE(sut.owners()[2].has_value());
}

TEST_CASE("sequence_table: the residents outside the best ranked are listed in rank order, not "
          "slot order") {
  sequence_table sut{rank_order::mlfq, 4};
  for (seq_id id = 1; id <= 5; ++id)
    add(sut, id, id);
  // 5 holds slot 0 and 3 holds slot 1: by slot 5 comes first, by rank 3.
  for (auto [id, slot] : {std::pair<seq_id, slot_id>{5, 0}, {3, 1}, {1, 2}}) {
    auto& s = *sut.find(id);
    sut.set_state(s, kv_state::resident);
    sut.take_slot(s, slot);
  }
  const auto top = sut.best_ranked(2);
  CHECK(ids_of(top) == std::vector<seq_id>{1, 2});
  CHECK(ids_of(sut.slot_holders()) == std::vector<seq_id>{5, 3, 1});
  CHECK(ids_of(sut.residents_in_rank_order(top)) == std::vector<seq_id>{3, 5});
}

TEST_CASE("sequence_table: queued sequences are found by the head of their prompt in rank order, "
          "and no longer once cancelled") {
  sequence_table sut{rank_order::mlfq, 4};
  add(sut, 1, 3);            // same head, ranked third
  add(sut, 2, 1);            // same head, ranked first
  add(sut, 3, 2, priority_class::interactive, 500); // another head
  auto& resident = add(sut, 4, 0);
  sut.set_state(resident, kv_state::resident); // not queued: never a candidate
  const auto head = reuse_head_of(prompt(1));
  REQUIRE(head.has_value());
  const std::vector<std::uint64_t> heads{*head};

  std::vector<seq_id> seen;
  sut.for_each_with_head(heads, 0, [&](seq_id id) {
    seen.push_back(id);
    return true;
  });
  CHECK(seen == std::vector<seq_id>{2, 1});

  // The visit stops when asked to.
  seen.clear();
  sut.for_each_with_head(heads, 0, [&](seq_id id) {
    seen.push_back(id);
    return false;
  });
  CHECK(seen == std::vector<seq_id>{2});

  sut.unrank(*sut.find(2));
  seen.clear();
  sut.for_each_with_head(heads, 0, [&](seq_id id) {
    seen.push_back(id);
    return true;
  });
  CHECK(seen == std::vector<seq_id>{1});
}

TEST_CASE("sequence_table: past 64 queued sequences on one head the search walks the rank order, "
          "up to the limit") {
  sequence_table sut{rank_order::mlfq, 4};
  add(sut, 1000, 0, priority_class::interactive, 500); // best ranked, another head
  for (seq_id id = 1; id <= 70; ++id)
    add(sut, id, 71 - id); // the highest id ranks first
  const std::vector<std::uint64_t> heads{*reuse_head_of(prompt(1))};

  std::vector<seq_id> seen;
  sut.for_each_with_head(heads, 0, [&](seq_id id) {
    seen.push_back(id);
    return true;
  });
  // The walk visits every ranked sequence: the caller checks the head.
  REQUIRE(seen.size() == 71);
  CHECK(seen[0] == 1000);
  CHECK(seen[1] == 70);
  CHECK(seen[70] == 1);

  seen.clear();
  sut.for_each_with_head(heads, 5, [&](seq_id id) {
    seen.push_back(id);
    return true;
  });
  CHECK(seen == std::vector<seq_id>{1000, 70, 69, 68, 67});
}

TEST_CASE("sequence_table: a step that moves a sequence to a new level re-ranks it, and aging "
          "returns a waiting one to level 0") {
  sequence_table sut{rank_order::mlfq, 4};
  auto& a = add(sut, 1, 1);
  auto& b = add(sut, 2, 2);
  CHECK(ids_of(sut.best_ranked(2)) == std::vector<seq_id>{1, 2});

  const auto before = a.position;
  a.position.level = 1;
  a.position.turn = 3;
  sut.moved(a, before);
  CHECK(ids_of(sut.best_ranked(2)) == std::vector<seq_id>{2, 1});

  // b holds a slot; a waits above level 0 and returns to it after 2 steps.
  sut.set_state(b, kv_state::resident);
  sut.take_slot(b, 0);
  sut.age(2);
  CHECK(a.position.level == 1);
  sut.age(2);
  CHECK(a.position.level == 0);
  CHECK(ids_of(sut.best_ranked(2)) == std::vector<seq_id>{2, 1}); // keeps its turn (3)
}
