#include "actors/kv_keeper.hpp"

#include <doctest/doctest.h>

#include <cstring>
#include <numeric>
#include <vector>

#include <unistd.h>

using namespace kvlane::actors;
using kvlane::backends::token_id;
using namespace std::chrono_literals;
namespace ipc = kvlane::ipc;

namespace {

constexpr std::uint64_t kib = 1024;
const auto t0 = std::chrono::steady_clock::time_point{} + 1h;

/// The lane with `n` transfers queued. Under an unmeasured cost model a dump
/// behind a busy lane never pays, so only an idle lane takes one.
lane_backlog busy(std::uint32_t n) { return lane_backlog{n, 0, 0}; }
const cost_model unmeasured;
const ipc::kv_fingerprint loaded{0xF11E, 0x70C, 0x1A7, "sim", "chatml"};

std::shared_ptr<ipc::snapshot_store> store_on(ipc::memfd_arena arena,
                                              const ipc::kv_fingerprint& fp) {
  ipc::store_options o;
  o.granularity = 64 * kib;
  auto store = ipc::snapshot_store::create(std::move(arena), o);
  REQUIRE(store);
  REQUIRE((*store)->register_model(0, 0, 0));
  REQUIRE((*store)->set_fingerprint(0, "m", fp));
  return std::shared_ptr<ipc::snapshot_store>(std::move(*store));
}

reuse_policy knobs() {
  reuse_policy p;
  p.mode = reuse_mode::store;
  p.min_prefix_tokens = 16;
  return p;
}

kv_keeper make_keeper(std::shared_ptr<ipc::snapshot_store> store) {
  kv_keeper_setup s;
  s.store = std::move(store);
  s.model_identity = 77;
  s.slots = 4;
  s.snapshot_size = [](std::uint32_t n) { return std::uint64_t{n} * kib; };
  return kv_keeper{std::move(s), knobs()};
}

std::vector<token_id> conversation() {
  std::vector<token_id> t(64);
  std::iota(t.begin(), t.end(), 1);
  return t;
}

std::vector<token_id> next_turn(std::vector<token_id> tokens) {
  tokens.push_back(99999);
  return tokens;
}

cost_model cheap_load() {
  cost_model c;
  c.fix(cost_figures{10, 1, 1, 1});
  return c;
}

/// The first daemon: one conversation of user 1000 retained, dumped into the
/// store (the lane's part: fill, seal), then a clean stop. Returns the kept
/// descriptors (arena, index), as systemd would hold them.
std::pair<int, int> first_run(const ipc::kv_fingerprint& fp) {
  auto arena = ipc::memfd_arena::create("kvlane-test-keeper-restart", 1024 * kib);
  REQUIRE(arena);
  auto store = store_on(std::move(*arena), fp);
  auto keeper = make_keeper(store);
  REQUIRE(keeper.retain(1000, "chat", conversation(), 0, t0));
  auto jobs = keeper.reclaim_warm(1, 0, 0, lane_backlog{}, unmeasured);
  REQUIRE(jobs.transfers.size() == 1);
  const auto& dump = *jobs.transfers[0];
  std::memset(dump.destination.data(), 0x5A, dump.destination.size());
  REQUIRE(store->seal(dump.snapshot));
  REQUIRE(keeper.retained_dump_done(dump, true));
  // The snapshot carries its tokens and the model's fingerprint.
  auto label = store->label(dump.snapshot);
  REQUIRE(label);
  REQUIRE(*label);
  CHECK((*label)->fingerprint == fp);
  const auto tokens = conversation();
  CHECK((*label)->tokens == std::vector<std::uint32_t>(tokens.begin(), tokens.end()));
  CHECK((*label)->session == "chat");
  auto index = ipc::index_file::create();
  REQUIRE(index);
  store->attach_index(std::move(*index));
  const auto persisted = store->persist();
  REQUIRE(persisted);
  CHECK(*persisted == 1);
  return {::dup(store->fd()), ::dup(store->index_fd())};
}

/// The next daemon, on the kept descriptors, with the model now fingerprinted `fp`.
std::shared_ptr<ipc::snapshot_store> second_run(std::pair<int, int> kept,
                                                const ipc::kv_fingerprint& fp) {
  auto arena = ipc::memfd_arena::adopt(kept.first);
  REQUIRE(arena);
  auto index = ipc::index_file::adopt(kept.second);
  REQUIRE(index);
  auto contents = ipc::decode_index(*index->read());
  REQUIRE(contents);
  auto store = store_on(std::move(*arena), fp);
  REQUIRE(store->recover(*contents));
  store->claim(0, "m");
  return store;
}

std::uint64_t discarded(const ipc::snapshot_store& store, ipc::discard_reason r) {
  return store.stats().discarded[static_cast<std::size_t>(r)];
}

} // namespace

TEST_CASE("kv_keeper: after a restart, a retained conversation comes back as a stored entry and "
          "its next turn loads it") {
  auto store = second_run(first_run(loaded), loaded);
  auto sut = make_keeper(store);
  CHECK(sut.adopt_restored(t0) == 1);
  CHECK(sut.counters().retained_restored == 1);
  const auto m = sut.find_reusable(1000, next_turn(conversation()));
  REQUIRE(m);
  CHECK(m->length == 64);
  CHECK(m->snapshot.has_value());
  CHECK_FALSE(m->slot.has_value());
  CHECK_FALSE(sut.find_reusable(1001, next_turn(conversation()))); // another user: never
  const auto costs = cheap_load();
  auto start = sut.start_from_retained(7, 1000, next_turn(conversation()), 2, costs, t0 + 1s);
  REQUIRE(start.how == reuse_start::kind::load);
  CHECK(start.length == 64);
  REQUIRE(start.jobs.transfers.size() == 1);
  CHECK(store->verify(start.jobs.transfers[0]->snapshot, start.jobs.transfers[0]->generation));
  // The entry keeps its origin: an admin drop by session still finds it.
  CHECK(sut.retained().find(m->entry)->origin.session == "chat");
}

TEST_CASE("kv_keeper: KV retained under another model file or tokenizer is never used after a "
          "restart") {
  SUBCASE("the model file changed") {
    auto now = loaded;
    now.model_file = 0xBEEF;
    auto store = second_run(first_run(loaded), now);
    auto sut = make_keeper(store);
    CHECK(sut.adopt_restored(t0) == 0);
    CHECK_FALSE(sut.find_reusable(1000, next_turn(conversation())));
    const auto start =
      sut.start_from_retained(7, 1000, next_turn(conversation()), 2, cheap_load(), t0);
    CHECK(start.how == reuse_start::kind::prefill);
    CHECK(discarded(*store, ipc::discard_reason::model_changed) == 1);
    CHECK(store->stats().snapshots == 0);
  }
  SUBCASE("the tokenizer changed") {
    auto now = loaded;
    now.tokenizer = 0xBEEF;
    auto store = second_run(first_run(loaded), now);
    auto sut = make_keeper(store);
    CHECK(sut.adopt_restored(t0) == 0);
    CHECK_FALSE(sut.find_reusable(1000, next_turn(conversation())));
    CHECK(discarded(*store, ipc::discard_reason::tokenizer_changed) == 1);
    CHECK(store->stats().snapshots == 0);
  }
}

TEST_CASE("kv_keeper: a restored snapshot whose label disagrees with the keeper's model is refused "
          "by the keeper itself") {
  // The store claimed it under the old fingerprint; the model the keeper
  // serves is fingerprinted otherwise by the time the keeper starts.
  auto store = second_run(first_run(loaded), loaded);
  auto now = loaded;
  now.kv_layout = 1;
  REQUIRE(store->set_fingerprint(0, "m", now));
  auto sut = make_keeper(store);
  CHECK(sut.adopt_restored(t0) == 0);
  CHECK(sut.counters().retained_discarded == 1);
  CHECK(discarded(*store, ipc::discard_reason::kv_layout_changed) == 1);
  CHECK(store->stats().snapshots == 0);
}

TEST_CASE("kv_keeper: a stored entry whose recorded tokens are not the prompt's is refused at use "
          "and counted") {
  auto store = second_run(first_run(loaded), loaded);
  auto sut = make_keeper(store);
  REQUIRE(sut.adopt_restored(t0) == 1);
  const auto m = sut.find_reusable(1000, next_turn(conversation()));
  REQUIRE(m);
  // Damage the label's copy of the tokens (what the index matched is the entry's own copy).
  auto label = store->label(*m->snapshot);
  REQUIRE(label);
  const_cast<ipc::snapshot_label&>(**label).tokens[30] ^= 1;
  const auto start =
    sut.start_from_retained(7, 1000, next_turn(conversation()), 2, cheap_load(), t0 + 1s);
  CHECK(start.how == reuse_start::kind::prefill);
  CHECK(discarded(*store, ipc::discard_reason::tokens_mismatch) == 1);
  CHECK_FALSE(sut.find_reusable(1000, next_turn(conversation())));
  CHECK(store->stats().snapshots == 0);
}

TEST_CASE("kv_keeper: flushing before a stop dumps every warm entry, one while the lane is idle, "
          "never dropping one the store can take") {
  auto arena = ipc::memfd_arena::create("kvlane-test-keeper-flush", 1024 * kib);
  REQUIRE(arena);
  auto store = store_on(std::move(*arena), loaded);
  auto sut = make_keeper(store);
  auto a = conversation();
  auto b = conversation();
  b[0] = 500;
  REQUIRE(sut.retain(1000, "", a, 0, t0));
  REQUIRE(sut.retain(1000, "", b, 1, t0 + 1s));
  // Nothing is wanted: without the flush both stay warm.
  CHECK(sut.reclaim_warm(0, 2, 0, lane_backlog{}, unmeasured).transfers.empty());
  sut.flush_warm();
  CHECK(sut.reclaim_warm(0, 2, 0, busy(1), unmeasured).transfers.empty()); // the lane is busy: wait
  for (int round = 0; round < 2; ++round) {
    auto jobs = sut.reclaim_warm(0, 2, 0, lane_backlog{}, unmeasured);
    REQUIRE(jobs.transfers.size() == 1);
    REQUIRE(store->seal(jobs.transfers[0]->snapshot));
    REQUIRE(sut.retained_dump_done(*jobs.transfers[0], true));
  }
  CHECK(sut.warm_count() == 0);
  CHECK(sut.counters().retained_dropped == 0);
  CHECK(store->stats().retained_snapshots == 2);
  CHECK(sut.reclaim_warm(0, 2, 0, lane_backlog{}, unmeasured).transfers.empty());
}
