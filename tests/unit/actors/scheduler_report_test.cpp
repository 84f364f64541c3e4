#include "actors/scheduler_report.hpp"

#include "actors/kv_keeper.hpp"
#include "actors/sequence_table.hpp"

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

std::vector<token_id> run(std::size_t n, token_id first) {
  std::vector<token_id> t(n);
  std::iota(t.begin(), t.end(), first);
  return t;
}

struct fixture {
  std::shared_ptr<ipc::snapshot_store> store;
  kvlane::backends::backend_info info;
  sequence_table seqs{rank_order::mlfq, 4};
  std::optional<kv_keeper> keeper;

  fixture() {
    auto arena = ipc::memfd_arena::create("kvlane-test-report", 1024 * kib);
    REQUIRE(arena);
    ipc::store_options o;
    o.granularity = 64 * kib;
    auto s = ipc::snapshot_store::create(std::move(*arena), o);
    REQUIRE(s);
    store = std::move(*s);
    REQUIRE(store->register_model(0, 0, 0));
    info.slots = 4;
    info.max_context = 256;
    info.bytes_per_token = kib;
    kv_keeper_setup k;
    k.store = store;
    k.slots = 4;
    // 1 KiB per position: 40 positions are 40 KiB in a slot, one 64 KiB granule in the store.
    k.snapshot_size = [](std::uint32_t n) { return std::uint64_t{n} * kib; };
    reuse_policy p;
    p.min_prefix_tokens = 16;
    keeper.emplace(std::move(k), p);
  }

  sequence& add(seq_id id, priority_class cls) {
    submission s;
    s.id = id;
    s.client = "app";
    s.priority = cls;
    s.prompt = run(8, 1);
    auto seq = std::make_unique<sequence>(s);
    seq->position = mlfq_position{cls, 0, 0, id, 0};
    return seqs.add(std::move(seq), s.client);
  }
};

} // namespace

TEST_CASE("scheduler_report: statistics count sequences by state and class, and retained KV by "
          "where its copy is") {
  fixture f;
  f.add(1, priority_class::interactive);
  f.add(2, priority_class::batch);
  auto& r = f.add(3, priority_class::interactive);
  f.seqs.set_state(r, kv_state::resident);
  f.seqs.take_slot(r, 0);
  auto& p = f.add(4, priority_class::batch);
  f.seqs.set_state(p, kv_state::parked);

  // One entry warm in slot 1, one stored (dumped from slot 2).
  REQUIRE(f.keeper->retain(1, "", run(40, 100), 1, t0));
  REQUIRE(f.keeper->retain(1, "", run(40, 200), 2, t0 - 1s));
  auto jobs = f.keeper->reclaim_warm(1, 0, 0, lane_backlog{}, cost_model{});
  REQUIRE(jobs.transfers.size() == 1);
  REQUIRE(f.store->seal(jobs.transfers[0]->snapshot));
  REQUIRE(f.keeper->retained_dump_done(*jobs.transfers[0], true));

  scheduler_stats counters;
  counters.model = "m";
  counters.submitted = 4;
  const auto sut = report_stats(counters, f.info, f.seqs, cost_model{}, fault_policy{}, *f.keeper,
                                t0 + 1s);
  CHECK(sut.model == "m");
  CHECK(sut.submitted == 4);
  CHECK(sut.slots == 4);
  CHECK(sut.slots_busy == 1);
  CHECK(sut.queued == 2);
  CHECK(sut.resident == 1);
  CHECK(sut.parked == 1);
  CHECK(sut.without_slot_interactive == 1);
  CHECK(sut.without_slot_batch == 2);
  CHECK(sut.retained == 2);
  CHECK(sut.retained_warm == 1);
  CHECK(sut.retained_stored == 1);
  CHECK(sut.retained_warm_bytes == 40 * kib);
  CHECK(sut.retained_store_bytes == 64 * kib); // rounded to the store's granularity
  CHECK(sut.retained_dumps == 1);
  CHECK(sut.step_base_ms == 0); // not measured yet
}

TEST_CASE("scheduler_report: listings show live sequences by id without the cancelled ones, and "
          "every retained entry") {
  fixture f;
  f.add(9, priority_class::batch);
  auto& cancelled = f.add(3, priority_class::interactive);
  cancelled.cancelled = true;
  auto& r = f.add(5, priority_class::interactive);
  f.seqs.set_state(r, kv_state::resident);
  f.seqs.take_slot(r, 2);

  const auto list = list_sequences(f.seqs, "m", std::chrono::steady_clock::now());
  REQUIRE(list.size() == 2);
  CHECK(list[0].id == 5);
  CHECK(list[0].phase == seq_phase::resident);
  CHECK(list[0].slot == 2);
  CHECK(list[0].model == "m");
  CHECK(list[1].id == 9);
  CHECK(list[1].priority == priority_class::batch);
  CHECK(list[1].slot == -1);

  REQUIRE(f.keeper->retain(7, "chat", run(40, 100), 1, t0));
  const auto entries = list_retained(*f.keeper, "m", t0 + 2s);
  REQUIRE(entries.size() == 1);
  CHECK(entries[0].owner == 7);
  CHECK(entries[0].session == "chat");
  CHECK(entries[0].tokens == 40);
  CHECK(entries[0].slot == 1);
  CHECK_FALSE(entries[0].stored);
  CHECK(entries[0].bytes == 40 * kib);
  CHECK(entries[0].idle_ms == doctest::Approx(2000));
}
