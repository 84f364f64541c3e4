#include "actors/retention.hpp"

#include <doctest/doctest.h>

#include <numeric>
#include <vector>

using namespace kvlane::actors;
using kvlane::backends::token_id;
using kvlane::ipc::snapshot_handle;
using namespace std::chrono_literals;

namespace {

constexpr prefix_scope alice{7, 1000};
constexpr prefix_scope bob{7, 1001};
const auto t0 = std::chrono::steady_clock::time_point{} + 1h;

std::vector<token_id> run(std::size_t n, token_id first = 1) {
  std::vector<token_id> t(n);
  std::iota(t.begin(), t.end(), first);
  return t;
}

std::vector<token_id> concat(std::vector<token_id> a, const std::vector<token_id>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

} // namespace

TEST_CASE("retention: a finished turn is found warm, then stored after its dump, for its user only") {
  retention sut(8, 16);
  std::vector<superseded> dropped;
  const auto turn1 = run(40);
  const auto id = sut.retain(alice, turn1, 3, {}, t0, dropped);
  REQUIRE(id.has_value());
  CHECK(dropped.empty());
  const auto turn2 = concat(turn1, run(10, 900));

  auto m = sut.match(alice, turn2, static_cast<std::uint32_t>(turn2.size() - 1));
  REQUIRE(m.has_value());
  CHECK(m->entry == *id);
  CHECK(m->length == 40);
  REQUIRE(m->slot.has_value());
  CHECK(*m->slot == 3);
  CHECK_FALSE(m->snapshot.has_value());
  CHECK_FALSE(sut.match(bob, turn2, 49).has_value());

  // The slot is needed: a dump starts; meanwhile there is nothing to take.
  sut.dump_started(*id);
  CHECK_FALSE(sut.coldest_warm().has_value());
  CHECK_FALSE(sut.match(alice, turn2, 49).has_value());
  REQUIRE(sut.dump_finished(*id, snapshot_handle{4, 1}));
  m = sut.match(alice, turn2, 49);
  REQUIRE(m.has_value());
  CHECK_FALSE(m->slot.has_value());
  REQUIRE(m->snapshot.has_value());
  CHECK(*m->snapshot == snapshot_handle{4, 1});
  CHECK(m->snapshot_len == 40);
  // Reuse from the store does not consume the entry.
  sut.use(*id, t0 + 2s);
  sut.use(*id, t0 + 3s);
  CHECK(sut.match(alice, turn2, 49).has_value());
  CHECK(sut.find(*id)->hits == 2);
  CHECK(sut.find(*id)->last_use == t0 + 3s);
  CHECK(sut.by_snapshot(snapshot_handle{4, 1}) == id);
}

TEST_CASE("retention: taking a warm slot consumes the entry unless it also has a stored copy") {
  retention sut(8, 8);
  std::vector<superseded> dropped;
  const auto a = sut.retain(alice, run(20), 0, {}, t0, dropped);
  REQUIRE(a);
  sut.slot_released(*a);
  CHECK(sut.find(*a) == nullptr);
  CHECK(sut.size() == 0);

  const auto b = sut.retain(alice, run(20, 50), 1, {}, t0, dropped);
  REQUIRE(b);
  sut.dump_started(*b);
  REQUIRE(sut.dump_finished(*b, snapshot_handle{1, 1}));
  CHECK_FALSE(sut.find(*b)->slot.has_value());
  sut.snapshot_lost(*b);
  CHECK(sut.find(*b) == nullptr);
}

TEST_CASE("retention: a failed dump of a warm copy forgets the entry") {
  retention sut(8, 8);
  std::vector<superseded> dropped;
  const auto a = sut.retain(alice, run(20), 0, {}, t0, dropped);
  sut.dump_started(*a);
  CHECK(sut.dump_finished(*a, std::nullopt));
  CHECK(sut.find(*a) == nullptr);
  CHECK_FALSE(sut.dump_finished(*a, snapshot_handle{1, 1})); // the caller frees it
}

TEST_CASE("retention: a newer turn supersedes the older turns it extends, not a branch") {
  retention sut(8, 8);
  std::vector<superseded> dropped;
  const auto turn1 = run(20);
  const auto turn2 = concat(turn1, run(12, 100));
  const auto branch = concat(turn1, run(12, 500));
  const auto a = sut.retain(alice, turn1, 0, {}, t0, dropped);
  sut.dump_started(*a);
  REQUIRE(sut.dump_finished(*a, snapshot_handle{9, 2}));
  const auto b = sut.retain(alice, branch, 1, {}, t0, dropped);
  REQUIRE(dropped.size() == 1);
  CHECK(dropped[0].id == *a);
  CHECK(dropped[0].snapshot == snapshot_handle{9, 2});
  dropped.clear();
  const auto c = sut.retain(alice, turn2, 2, {}, t0, dropped);
  CHECK(dropped.empty()); // b is a branch, not a prefix of c
  CHECK(sut.size() == 2);
  CHECK(sut.find(*b) != nullptr);
  CHECK(sut.find(*c) != nullptr);
  // Another user's identical history supersedes nothing of alice's.
  const auto d = sut.retain(bob, turn2, 3, {}, t0, dropped);
  CHECK(dropped.empty());
  CHECK(sut.size() == 3);
  CHECK(d.has_value());
}

TEST_CASE("retention: short entries and short matches are below the minimum prefix") {
  retention sut(8, 32);
  std::vector<superseded> dropped;
  CHECK_FALSE(sut.retain(alice, run(31), 0, {}, t0, dropped).has_value());
  const auto a = sut.retain(alice, run(64), 0, {}, t0, dropped);
  REQUIRE(a);
  auto prompt = run(24);
  prompt.push_back(7777);
  CHECK_FALSE(sut.match(alice, prompt, 25).has_value());
  sut.set_min_prefix(16);
  CHECK(sut.match(alice, prompt, 25).has_value());
}

TEST_CASE("retention: the coldest warm entry and idle entries by last use") {
  retention sut(8, 8);
  std::vector<superseded> dropped;
  const auto a = sut.retain(alice, run(16, 1), 0, {}, t0, dropped);
  const auto b = sut.retain(alice, run(16, 100), 1, {}, t0 + 1s, dropped);
  const auto c = sut.retain(alice, run(16, 200), 2, {}, t0 + 2s, dropped);
  CHECK(sut.coldest_warm() == a);
  // Using a makes b the coldest.
  auto prompt = run(17, 1);
  const auto used = sut.match(alice, prompt, 16);
  REQUIRE(used);
  sut.use(used->entry, t0 + 3s);
  CHECK(sut.coldest_warm() == b);
  CHECK(sut.idle_since(t0 + 3500ms, 1s) == std::vector<retained_id>{*b, *c});
  CHECK(sut.idle_since(t0 + 3500ms, 0ms).empty());
  const auto gone = sut.erase(*b);
  REQUIRE(gone);
  CHECK(gone->slot == 1u);
  CHECK(sut.ids() == std::vector<retained_id>{*a, *c});
  // The next to expire is the least recently used of those left.
  CHECK(sut.oldest_use() == t0 + 2s);
  (void)sut.erase(*c);
  CHECK(sut.oldest_use() == t0 + 3s);
  (void)sut.erase(*a);
  CHECK_FALSE(sut.oldest_use().has_value());
  CHECK_FALSE(sut.coldest_warm().has_value());
}

TEST_CASE("retention: a snapshot names its entry only while the entry holds it") {
  retention sut(8, 8);
  std::vector<superseded> dropped;
  const auto a = sut.retain(alice, run(16, 1), 0, {}, t0, dropped);
  const auto b = sut.retain(alice, run(16, 100), 1, {}, t0, dropped);
  const auto c = sut.retain(alice, run(16, 200), 2, {}, t0, dropped);
  for (const auto id : {a, b, c})
    sut.dump_started(*id);
  REQUIRE(sut.dump_finished(*a, snapshot_handle{1, 1}));
  REQUIRE(sut.dump_finished(*b, snapshot_handle{2, 1}));
  REQUIRE(sut.dump_finished(*c, snapshot_handle{3, 1}));
  CHECK(sut.by_snapshot(snapshot_handle{2, 1}) == b);
  // Another generation of the same store slot is another snapshot.
  CHECK_FALSE(sut.by_snapshot(snapshot_handle{2, 2}).has_value());
  // Lost (the entry had no other copy, so it goes), erased, superseded.
  sut.snapshot_lost(*a);
  CHECK_FALSE(sut.by_snapshot(snapshot_handle{1, 1}).has_value());
  CHECK(sut.find(*a) == nullptr);
  (void)sut.erase(*b);
  CHECK_FALSE(sut.by_snapshot(snapshot_handle{2, 1}).has_value());
  const auto longer = sut.retain(alice, concat(run(16, 200), run(8, 500)), 2, {}, t0 + 1s, dropped);
  REQUIRE(longer);
  REQUIRE(dropped.size() == 1);
  CHECK(dropped[0].id == *c);
  CHECK(dropped[0].snapshot == snapshot_handle{3, 1});
  CHECK_FALSE(sut.by_snapshot(snapshot_handle{3, 1}).has_value());
  CHECK(sut.oldest_use() == t0 + 1s);
}
