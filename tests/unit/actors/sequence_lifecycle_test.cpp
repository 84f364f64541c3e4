#include "actors/sequence_lifecycle.hpp"

#include <doctest/doctest.h>

#include <spdlog/logger.h>

#include <numeric>
#include <vector>

using namespace kvlane::actors;
using kvlane::backends::token_id;
using namespace std::chrono_literals;
namespace ipc = kvlane::ipc;

namespace {

constexpr std::uint64_t kib = 1024;
const auto t0 = std::chrono::steady_clock::time_point{} + 1h;

/// What the actor would do, recorded.
struct recording_port final : lifecycle_port {
  std::vector<transfer_job_ptr> transfers;
  std::vector<std::pair<seq_id, stream_end>> ends;
  std::vector<std::pair<seq_id, seq_phase>> phases;
  transfer_tracker* tracker = nullptr;

  void send_transfer(transfer_job_ptr job) override {
    tracker->started(*job);
    transfers.push_back(std::move(job));
  }
  void end_stream(sequence& s, stream_end end) override { ends.emplace_back(s.id, std::move(end)); }
  void phase_changed(const sequence& s, seq_phase p) override { phases.emplace_back(s.id, p); }
  void ended(const sequence&, end_reason) override {}
  void retained_kept() override {}

  std::vector<seq_phase> phases_of(seq_id id) const {
    std::vector<seq_phase> out;
    for (const auto& [i, p] : phases)
      if (i == id)
        out.push_back(p);
    return out;
  }
};

/// One model's tables around the unit under test; snapshots of n positions are n KiB.
struct fixture {
  std::shared_ptr<ipc::snapshot_store> store;
  sequence_table seqs{rank_order::mlfq, 4};
  std::optional<kv_keeper> kv;
  transfer_tracker transfers;
  mlfq_policy mlfq;
  cost_model costs;
  fault_policy faults;
  scheduler_stats stats;
  std::string last_error;
  bool shutting_down = false;
  recording_port port;
  spdlog::logger log{"test"};
  std::optional<sequence_lifecycle> sut;

  explicit fixture(std::uint64_t store_granules = 16) {
    auto arena = ipc::memfd_arena::create("kvlane-test-lifecycle", 2048 * kib);
    REQUIRE(arena);
    ipc::store_options o;
    o.limit_bytes = store_granules * 64 * kib;
    o.granularity = 64 * kib;
    auto s = ipc::snapshot_store::create(std::move(*arena), o);
    REQUIRE(s);
    store = std::move(*s);
    REQUIRE(store->register_model(0, 0, 0));
    kv_keeper_setup k;
    k.store = store;
    k.slots = 4;
    k.snapshot_size = [](std::uint32_t n) { return std::uint64_t{n} * kib; };
    reuse_policy r;
    r.min_prefix_tokens = 16;
    kv.emplace(std::move(k), r);
    port.tracker = &transfers;
    sut.emplace(lifecycle_tables{seqs, *kv, transfers, mlfq, costs, faults, stats, last_error,
                                 shutting_down},
                port, log, "m");
  }

  /// A resident sequence of `prompt` tokens, all of them in `slot`.
  sequence& resident(seq_id id, std::uint32_t prompt, slot_id slot) {
    submission sub;
    sub.id = id;
    sub.client = "app";
    sub.owner = 1;
    sub.prompt.resize(prompt);
    std::iota(sub.prompt.begin(), sub.prompt.end(), static_cast<token_id>(id * 1000));
    auto seq = std::make_unique<sequence>(sub);
    seq->position = mlfq.enter(priority_class::interactive, prompt);
    auto& s = seqs.add(std::move(seq), "app");
    sut->admit(s, slot, t0);
    REQUIRE(s.state == kv_state::resident);
    s.kv_len = prompt;
    return s;
  }

  /// The lane's reply to the last transfer job (a dump is sealed first).
  void reply(bool ok = true) {
    REQUIRE_FALSE(port.transfers.empty());
    const auto job = port.transfers.back();
    if (job->kind == transfer_kind::dump && ok)
      REQUIRE(store->seal(job->snapshot));
    transfer_done done;
    done.job = *job;
    if (!ok)
      done.error = "injected";
    done.start = t0;
    done.end = t0 + 1ms;
    sut->transfer_ended(done, 0, t0);
  }
};

} // namespace

TEST_CASE("sequence_lifecycle: a cancel during a dump ends the stream when the dump replies, with "
          "its slot and snapshot freed") {
  fixture f;
  auto& s = f.resident(1, 64, 0);
  f.sut->evict(s, eviction::swap);
  REQUIRE(f.port.transfers.size() == 1);
  CHECK(s.state == kv_state::dumping);
  CHECK(f.stats.swaps == 1);

  f.sut->cancel(1, "cancelled", t0);
  CHECK(f.port.ends.empty()); // the lane still writes its slot
  CHECK(f.seqs.find(1) != nullptr);

  f.reply();
  REQUIRE(f.port.ends.size() == 1);
  CHECK(f.port.ends[0].second.reason == end_reason::cancelled);
  CHECK(f.seqs.find(1) == nullptr);
  CHECK_FALSE(f.seqs.owners()[0].has_value());
  CHECK(f.store->stats().snapshots == 0);
  CHECK(f.transfers.pending() == 0);
  CHECK(f.port.phases_of(1) == std::vector<seq_phase>{seq_phase::resident, seq_phase::dumping,
                                                       seq_phase::parked, seq_phase::ended});
}

TEST_CASE("sequence_lifecycle: a swap the store cannot hold becomes a recompute, and the request "
          "goes on") {
  fixture f(1);
  auto& s = f.resident(1, 128, 2); // 128 KiB: more than the whole store
  f.sut->evict(s, eviction::swap);
  CHECK(f.port.transfers.empty());
  CHECK(s.state == kv_state::queued);
  CHECK(s.kv_len == 0);
  CHECK_FALSE(f.seqs.owners()[2].has_value());
  CHECK(f.stats.preemptions == 1);
  CHECK(f.stats.swaps == 0);
  CHECK(f.stats.recomputes == 1);
  CHECK(f.port.ends.empty());
}

TEST_CASE("sequence_lifecycle: a failed dump drops the KV to be recomputed, and frees the "
          "reservation") {
  fixture f;
  auto& s = f.resident(1, 64, 1);
  f.sut->evict(s, eviction::swap);
  f.reply(false);
  CHECK(s.state == kv_state::queued);
  CHECK(s.kv_len == 0);
  CHECK(f.stats.dump_failures == 1);
  CHECK(f.store->stats().used_bytes == 0);
  CHECK_FALSE(f.kv->parked(1));
}

TEST_CASE("sequence_lifecycle: a parked sequence whose snapshot is gone recomputes in the slot it "
          "is given") {
  fixture f;
  auto& s = f.resident(1, 64, 0);
  f.sut->evict(s, eviction::swap);
  const auto handle = f.port.transfers.back()->snapshot;
  f.reply();
  REQUIRE(s.state == kv_state::parked);
  REQUIRE(f.store->free(handle)); // evicted behind its back (another model's reservation)

  f.sut->admit(s, 3, t0);
  CHECK(s.state == kv_state::resident);
  CHECK(s.kv_len == 0);
  CHECK(s.slot == std::optional<slot_id>{3});
  CHECK(f.port.transfers.size() == 1); // no load was sent
  CHECK(f.kv->counters().snapshots_lost == 1);
}

TEST_CASE("sequence_lifecycle: a stop that arrives during a step keeps the prompt and the kept "
          "tokens warm once the step is over") {
  fixture f;
  auto& s = f.resident(1, 40, 2);
  for (token_id t : {7, 8, 9}) { // three generated, all in the slot
    s.tokens.push_back(t);
    ++s.generated;
  }
  s.kv_len = 43;
  s.in_step = true;
  CHECK_FALSE(f.sut->stop(1, 2, 1, t0)); // the step still runs: ends when it replies
  CHECK(f.port.ends.empty());

  s.in_step = false;
  f.sut->end_marked(s, t0);
  REQUIRE(f.port.ends.size() == 1);
  CHECK(f.port.ends[0].second.reason == end_reason::stop);
  CHECK(f.port.ends[0].second.generated_tokens == 2);
  // The prompt and one generated token stay warm in slot 2 for the next turn.
  CHECK(f.kv->warm_in(2));
  REQUIRE(f.kv->retained().size() == 1);
  CHECK(f.kv->retained().find(f.kv->retained().ids()[0])->kv_len == 41);
  CHECK_FALSE(f.seqs.owners()[2].has_value());
}
