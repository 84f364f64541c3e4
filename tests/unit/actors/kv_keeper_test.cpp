#include "actors/kv_keeper.hpp"

#include <doctest/doctest.h>

#include <numeric>
#include <vector>

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

/// A store whose limit holds `granules` snapshots of 64 tokens (64 KiB each).
std::shared_ptr<ipc::snapshot_store> make_store(std::uint64_t granules) {
  auto arena = ipc::memfd_arena::create("kvlane-test-keeper", 1024 * kib);
  REQUIRE(arena);
  ipc::store_options o;
  o.limit_bytes = granules * 64 * kib;
  o.granularity = 64 * kib;
  auto store = ipc::snapshot_store::create(std::move(*arena), o);
  REQUIRE(store);
  REQUIRE((*store)->register_model(0, 0, 0));
  return std::shared_ptr<ipc::snapshot_store>(std::move(*store));
}

reuse_policy knobs(reuse_mode mode = reuse_mode::store, std::uint32_t ttl_s = 0) {
  reuse_policy p;
  p.mode = mode;
  p.idle_ttl_s = ttl_s;
  p.min_prefix_tokens = 16;
  return p;
}

kv_keeper make_keeper(std::shared_ptr<ipc::snapshot_store> store, reuse_policy p = knobs()) {
  kv_keeper_setup s;
  s.store = std::move(store);
  s.model_identity = 77;
  s.model_index = 0;
  s.slots = 4;
  s.snapshots = true;
  s.snapshot_size = [](std::uint32_t n) { return std::uint64_t{n} * kib; };
  return kv_keeper{std::move(s), p};
}

std::vector<token_id> run(std::size_t n, token_id first) {
  std::vector<token_id> t(n);
  std::iota(t.begin(), t.end(), first);
  return t;
}

/// `tokens` and then one more: a prompt that can reuse all of them.
std::vector<token_id> next_turn(std::vector<token_id> tokens) {
  tokens.push_back(99999);
  return tokens;
}

/// What the transfer lane does with a dump: seal what it wrote.
void seal(ipc::snapshot_store& store, const transfer_job& job) {
  REQUIRE(store.seal(job.snapshot));
}

/// Parks sequence `id` of 64 tokens: swap out, the lane's dump, the reply.
void park(kv_keeper& sut, ipc::snapshot_store& store, seq_id id, std::uint8_t priority) {
  std::string why;
  auto jobs = sut.swap_out(id, 0, 64, 1, priority, why);
  REQUIRE(jobs.transfers.size() == 1);
  CHECK(jobs.lost.empty());
  seal(store, *jobs.transfers[0]);
  sut.dump_done(id, *jobs.transfers[0], true);
  REQUIRE(sut.parked(id));
}

} // namespace

TEST_CASE("kv_keeper: the coldest warm entry is dumped while the lane is idle, the next dropped "
          "while the lane is busy and the cost model has no figures") {
  auto store = make_store(8);
  auto sut = make_keeper(store);
  const auto a = run(64, 1), b = run(64, 1000);
  REQUIRE(sut.retain(1, "", a, 0, t0));
  REQUIRE(sut.retain(1, "", b, 1, t0 + 1s));
  CHECK(sut.warm_count() == 2);

  // One slot wanted, none free or promised, the lane idle: the colder entry (a) is dumped.
  auto jobs = sut.reclaim_warm(1, 0, 0, lane_backlog{}, unmeasured);
  REQUIRE(jobs.transfers.size() == 1);
  const auto dump = jobs.transfers[0];
  CHECK(dump->kind == transfer_kind::dump);
  CHECK(dump->slot == 0);
  CHECK(dump->retained != 0);
  CHECK(dump->cache_len == 64);
  CHECK(sut.warm_in(0)); // held until the dump ends
  CHECK(sut.counters().retained_dumps == 1);

  // Covered by the promised slot: nothing more goes.
  CHECK(sut.reclaim_warm(1, 0, 1, busy(1), unmeasured).transfers.empty());
  CHECK(sut.warm_in(1));

  // A second slot wanted while the lane runs that dump: b is dropped at once.
  jobs = sut.reclaim_warm(2, 0, 1, busy(1), unmeasured);
  CHECK(jobs.transfers.empty());
  CHECK_FALSE(sut.warm_in(1));
  CHECK(sut.counters().retained_dropped == 1);
  CHECK_FALSE(sut.find_reusable(1, next_turn(b)).has_value());

  // The dump ends: a's copy is in the store, its slot free.
  seal(*store, *dump);
  CHECK(sut.retained_dump_done(*dump, true));
  CHECK_FALSE(sut.warm_in(0));
  const auto m = sut.find_reusable(1, next_turn(a));
  REQUIRE(m.has_value());
  CHECK_FALSE(m->slot.has_value());
  CHECK(m->snapshot.has_value());
  CHECK(m->length == 64);
}

TEST_CASE("kv_keeper: behind a busy lane a warm entry is dumped when the wait plus its dump costs "
          "less than re-prefilling it, else dropped") {
  // 64 tokens: 64 KiB (make_keeper), 64 ms to prefill, 6.25 ms to dump.
  cost_figures f;
  f.step_per_token_ms = 1.0;
  f.dump_ms_per_mib = 100.0;
  f.load_ms_per_mib = 100.0;
  cost_model costs;
  costs.fix(f);
  auto store = make_store(8);
  auto sut = make_keeper(store);
  const auto a = run(64, 1), b = run(64, 1000), c = run(64, 2000);
  REQUIRE(sut.retain(1, "", a, 0, t0));
  REQUIRE(sut.retain(1, "", b, 1, t0 + 1s));
  REQUIRE(sut.retain(1, "", c, 2, t0 + 2s));

  // Two slots wanted. Queued: a 256 KiB dump and a 64 KiB load (25 + 6.25 ms). The first
  // entry waits 31.25 + 6.25 ms < 64: dumped. The second waits behind that one too
  // (43.75 + 6.25 ms < 64): dumped.
  auto jobs = sut.reclaim_warm(2, 0, 0, lane_backlog{2, 256 * kib, 64 * kib}, costs);
  REQUIRE(jobs.transfers.size() == 2);
  CHECK(jobs.transfers[0]->slot == 0);
  CHECK(jobs.transfers[1]->slot == 1);
  CHECK(sut.warm_in(0));
  CHECK(sut.warm_in(1));
  CHECK(sut.counters().retained_dumps == 2);
  CHECK(sut.counters().retained_dropped == 0);

  // A third slot wanted behind 640 KiB of dumps (62.5 + 6.25 ms >= 64): c is dropped.
  jobs = sut.reclaim_warm(3, 0, 2, lane_backlog{3, 640 * kib, 0}, costs);
  CHECK(jobs.transfers.empty());
  CHECK_FALSE(sut.warm_in(2));
  CHECK(sut.counters().retained_dropped == 1);
  CHECK_FALSE(sut.find_reusable(1, next_turn(c)).has_value());
}

TEST_CASE("kv_keeper: warm entries are dropped, not dumped, when reuse keeps KV in slots only") {
  auto store = make_store(8);
  auto sut = make_keeper(store, knobs(reuse_mode::slot));
  REQUIRE(sut.retain(1, "", run(64, 1), 2, t0));
  const auto jobs = sut.reclaim_warm(1, 0, 0, lane_backlog{}, unmeasured);
  CHECK(jobs.transfers.empty());
  CHECK_FALSE(sut.warm_in(2));
  CHECK(sut.counters().retained_dropped == 1);
  CHECK(store->stats().snapshots == 0);
}

TEST_CASE("kv_keeper: a full store evicts the retained snapshot before any parked one, then the "
          "parked one of lowest priority, which the scheduler is told to recompute") {
  auto store = make_store(3);
  auto sut = make_keeper(store);
  park(sut, *store, 10, 10);
  // A retained entry stored: retain, dump, seal.
  const auto r = run(64, 500);
  REQUIRE(sut.retain(1, "", r, 1, t0));
  auto jobs = sut.reclaim_warm(1, 0, 0, lane_backlog{}, unmeasured);
  REQUIRE(jobs.transfers.size() == 1);
  seal(*store, *jobs.transfers[0]);
  REQUIRE(sut.retained_dump_done(*jobs.transfers[0], true));
  park(sut, *store, 11, 200);
  REQUIRE(store->stats().snapshots == 3); // full

  // A swap needs room: the retained snapshot goes first, no sequence is lost.
  std::string why;
  jobs = sut.swap_out(12, 2, 64, 1, 100, why);
  REQUIRE(jobs.transfers.size() == 1);
  CHECK(jobs.lost.empty());
  CHECK(sut.counters().retained_lost == 1);
  CHECK(sut.retained().size() == 0);
  CHECK_FALSE(sut.find_reusable(1, next_turn(r)).has_value());
  seal(*store, *jobs.transfers[0]);
  sut.dump_done(12, *jobs.transfers[0], true);

  // The next swap evicts the parked snapshot of lowest priority (10): it must recompute.
  jobs = sut.swap_out(13, 3, 64, 1, 100, why);
  REQUIRE(jobs.transfers.size() == 1);
  CHECK(jobs.lost == std::vector<seq_id>{10});
  CHECK_FALSE(sut.parked(10));
  CHECK(sut.parked(11));
  CHECK(sut.counters().snapshots_lost == 1);
}

TEST_CASE("kv_keeper: a swap the store cannot hold is refused with the store's reason") {
  auto store = make_store(1);
  auto sut = make_keeper(store);
  std::string why;
  // 128 tokens = 128 KiB: more than the store's limit, nothing to evict.
  const auto jobs = sut.swap_out(5, 0, 128, 1, 100, why);
  CHECK(jobs.transfers.empty());
  CHECK_FALSE(why.empty());
  CHECK_FALSE(sut.parked(5));
  CHECK(store->stats().used_bytes == 0);
}

TEST_CASE("kv_keeper: a stored prefix is loaded when the load beats the prefill, else prefilled") {
  auto store = make_store(8);
  auto sut = make_keeper(store);
  const auto a = run(64, 1);
  REQUIRE(sut.retain(1, "", a, 0, t0));
  auto jobs = sut.reclaim_warm(1, 0, 0, lane_backlog{}, unmeasured);
  REQUIRE(jobs.transfers.size() == 1);
  seal(*store, *jobs.transfers[0]);
  REQUIRE(sut.retained_dump_done(*jobs.transfers[0], true));

  cost_model cheap_load;
  cheap_load.fix(cost_figures{10, 1, 1, 1}); // 64 KiB load ~0.06 ms against 64 tokens of prefill
  auto start = sut.start_from_retained(40, 1, next_turn(a), 3, cheap_load, t0 + 1s);
  REQUIRE(start.how == reuse_start::kind::load);
  CHECK(start.length == 64);
  REQUIRE(start.jobs.transfers.size() == 1);
  const auto load = start.jobs.transfers[0];
  CHECK(load->kind == transfer_kind::load);
  CHECK(load->seq == 40);
  CHECK(load->slot == 3);
  CHECK(load->keep_snapshot);
  transfer_done done;
  done.job = *load;
  sut.load_done(done);
  sut.count_stored_hit(start.length);
  CHECK(sut.counters().reuse_hits == 1);
  CHECK(sut.counters().reused_tokens == 64);
  // The entry stays in the store for later requests.
  CHECK(store->stats().snapshots == 1);
  CHECK(sut.find_reusable(1, next_turn(a)).has_value());

  cost_model dear_load;
  dear_load.fix(cost_figures{10, 1, 1, 1e6});
  start = sut.start_from_retained(41, 1, next_turn(a), 3, dear_load, t0 + 2s);
  CHECK(start.how == reuse_start::kind::prefill);
  CHECK(start.jobs.transfers.empty());
  CHECK(sut.counters().reuse_recomputed == 1);

  // Another user never reuses it.
  start = sut.start_from_retained(42, 2, next_turn(a), 3, cheap_load, t0 + 3s);
  CHECK(start.how == reuse_start::kind::prefill);
}

TEST_CASE("kv_keeper: a warm prefix is taken from its slot and consumed") {
  auto store = make_store(8);
  auto sut = make_keeper(store);
  const auto a = run(40, 1);
  REQUIRE(sut.retain(1, "", a, 2, t0));
  cost_model costs;
  const auto start = sut.start_from_retained(7, 1, next_turn(a), 0, costs, t0 + 1s);
  REQUIRE(start.how == reuse_start::kind::warm);
  CHECK(start.slot == 2);
  CHECK(start.length == 40);
  CHECK_FALSE(sut.any_warm());
  CHECK(sut.retained().size() == 0);
  CHECK(sut.counters().reuse_warm_hits == 1);
}

TEST_CASE("kv_keeper: a parked sequence's snapshot is freed once: when it ends parked, after its "
          "load, or when its dump fails") {
  auto store = make_store(8);
  auto sut = make_keeper(store);
  park(sut, *store, 1, 100);
  CHECK(store->stats().snapshots == 1);
  sut.release(1);
  CHECK_FALSE(sut.parked(1));
  CHECK(store->stats().snapshots == 0);

  park(sut, *store, 2, 100);
  auto jobs = sut.restore(2, 3, 64, 1);
  REQUIRE(jobs.transfers.size() == 1);
  CHECK(jobs.transfers[0]->kind == transfer_kind::load);
  CHECK(jobs.transfers[0]->slot == 3);
  CHECK_FALSE(sut.parked(2)); // loading
  sut.release(2);             // a lane works on it: nothing is freed yet
  CHECK(store->stats().snapshots == 1);
  transfer_done done;
  done.job = *jobs.transfers[0];
  sut.load_done(done);
  CHECK(store->stats().snapshots == 0);

  std::string why;
  jobs = sut.swap_out(3, 0, 64, 1, 100, why);
  REQUIRE(jobs.transfers.size() == 1);
  sut.dump_done(3, *jobs.transfers[0], false);
  CHECK_FALSE(sut.parked(3));
  CHECK(store->stats().used_bytes == 0);
}

TEST_CASE("kv_keeper: a parked snapshot the store lost cannot be restored") {
  auto store = make_store(8);
  auto sut = make_keeper(store);
  CHECK(sut.restore(9, 0, 64, 1).transfers.empty());
  CHECK(sut.counters().snapshots_lost == 1);
}

TEST_CASE("kv_keeper: an admin drop by session removes only that session's entries and frees "
          "their slots and snapshots") {
  auto store = make_store(8);
  auto sut = make_keeper(store);
  REQUIRE(sut.retain(1, "chat", run(64, 1), 0, t0));
  REQUIRE(sut.retain(1, "other", run(64, 1000), 1, t0));
  REQUIRE(sut.retain(2, "chat", run(64, 2000), 2, t0));
  // Store the first one so that the drop frees a snapshot too.
  auto jobs = sut.reclaim_warm(1, 0, 0, lane_backlog{}, unmeasured);
  REQUIRE(jobs.transfers.size() == 1);
  seal(*store, *jobs.transfers[0]);
  REQUIRE(sut.retained_dump_done(*jobs.transfers[0], true));

  retained_drop_request req;
  req.session = retained_drop_request::session_selector{1, "chat"};
  const auto freed = sut.drop(req);
  CHECK(freed.entries == 1);
  CHECK(freed.snapshots == 1);
  CHECK(freed.slots == 0);
  CHECK(freed.tokens == 64);
  CHECK(freed.store_bytes == 64 * kib);
  CHECK(store->stats().snapshots == 0);
  CHECK(sut.retained().size() == 2);
  CHECK(sut.warm_in(1));
  CHECK(sut.warm_in(2));
  CHECK(sut.counters().retained_admin_dropped == 1);
}

TEST_CASE("kv_keeper: idle entries expire when the timer is due, otherwise at most once a second") {
  auto store = make_store(8);
  auto sut = make_keeper(store, knobs(reuse_mode::store, 10));
  REQUIRE(sut.retain(1, "", run(64, 1), 0, t0));
  // The timer is armed once for the entry's deadline.
  CHECK(sut.expiry_to_arm() == t0 + 10s);
  CHECK_FALSE(sut.expiry_to_arm().has_value());

  CHECK_FALSE(sut.expire_idle(t0 + 5s, false)); // not idle long enough
  REQUIRE(sut.retain(1, "", run(64, 1000), 1, t0 + 1s));
  CHECK(sut.expire_idle(t0 + 10s + 500ms, false)); // the first is past its TTL
  CHECK(sut.retained().size() == 1);
  CHECK(sut.counters().retained_expired == 1);
  CHECK_FALSE(sut.warm_in(0));
  CHECK(sut.warm_in(1));

  sut.expiry_fired();
  CHECK(sut.expiry_to_arm() == t0 + 11s);
  // The second is past its TTL too, but the last check was 0.5 s ago: only the timer expires it.
  CHECK_FALSE(sut.expire_idle(t0 + 11s + 1ms, false));
  CHECK(sut.retained().size() == 1);
  CHECK(sut.expire_idle(t0 + 11s + 1ms, true));
  CHECK(sut.retained().size() == 0);
  CHECK(sut.counters().retained_expired == 2);
  CHECK_FALSE(sut.any_warm());
}
