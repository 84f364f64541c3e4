// Two sim models loaded through one instance_context, both streaming at once:
// on one device their backend calls never overlap in time (each lane passes
// the device's gate around its calls); on two devices they do.

#include "actors/model_instance.hpp"
#include "actors/session.hpp"
#include "actors/store_restart.hpp"
#include "actors/token_stream.hpp"

#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>
#include <caf/send.hpp>

#include <doctest/doctest.h>

#include <algorithm>
#include <chrono>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

using namespace kvlane;
using namespace std::chrono_literals;

namespace {

using clock_type = std::chrono::steady_clock;

enum class call_kind { step, transfer };

struct call {
  std::string model;
  call_kind kind;
  clock_type::time_point start, end;
};

class call_log {
public:
  void add(call c) {
    std::lock_guard lock{mutex_};
    calls_.push_back(std::move(c));
  }
  std::vector<call> calls() const {
    std::lock_guard lock{mutex_};
    return calls_;
  }

private:
  mutable std::mutex mutex_;
  std::vector<call> calls_;
};

/// Forwards every call to the sim and records when each step, dump and load ran.
class recording_backend final : public backends::backend {
public:
  recording_backend(std::unique_ptr<backends::backend> inner, std::string model, call_log& log)
    : inner_(std::move(inner)), model_(std::move(model)), log_(log) {}

  const backends::backend_info& info() const noexcept override { return inner_->info(); }
  const backends::tokenizer& tokens() const noexcept override { return inner_->tokens(); }

  expected<void, backends::backend_error> step(std::span<const backends::step_row> rows,
                                               backends::step_output& out) override {
    const auto start = clock_type::now();
    auto r = inner_->step(rows, out);
    log_.add({model_, call_kind::step, start, clock_type::now()});
    return r;
  }
  expected<std::size_t, backends::backend_error> dump(backends::slot_id slot,
                                                      std::uint32_t cache_len,
                                                      std::span<std::byte> destination) override {
    const auto start = clock_type::now();
    auto r = inner_->dump(slot, cache_len, destination);
    log_.add({model_, call_kind::transfer, start, clock_type::now()});
    return r;
  }
  expected<void, backends::backend_error> load(backends::slot_id slot, std::uint32_t cache_len,
                                               std::span<const std::byte> source) override {
    const auto start = clock_type::now();
    auto r = inner_->load(slot, cache_len, source);
    log_.add({model_, call_kind::transfer, start, clock_type::now()});
    return r;
  }

private:
  std::unique_ptr<backends::backend> inner_;
  std::string model_;
  call_log& log_;
};

/// Two small sim models, "a" and "b", on the devices named (empty: the default).
actors::engine_config two_models(std::string device_a, std::string device_b) {
  actors::engine_config c;
  c.scheduler.mode = actors::scheduler_mode::overlap;
  c.scheduler.quantum_steps = 4; // short quanta: sequences swap, so transfers run too
  c.scheduler.levels = 3;
  c.scheduler.spare_slots = 0;
  c.scheduler.max_step_tokens = 64;
  c.store.max_bytes = 64ull << 20;
  c.reuse.mode = actors::reuse_mode::off;
  for (auto [name, device] : {std::pair{"a", device_a}, std::pair{"b", device_b}}) {
    actors::model_config m;
    m.name = name;
    m.backend.kind = "sim";
    m.backend.device = device;
    m.backend.sim.slots = 2;
    m.backend.sim.max_context = 256;
    m.backend.sim.max_prefill_chunk = 32;
    m.backend.sim.snapshot_bytes = 256 * 1024;
    m.backend.sim.time_scale = 40; // a step ~1 ms of wall time: long enough to overlap
    c.models.push_back(m);
  }
  return c;
}

/// Whether some call of model a and some call of model b of `kind` ran at the same time.
bool models_overlap(const std::vector<call>& calls, call_kind kind) {
  for (const auto& x : calls)
    for (const auto& y : calls)
      if (x.kind == kind && y.kind == kind && x.model == "a" && y.model == "b"
          && x.start < y.end && y.start < x.end)
        return true;
  return false;
}

struct run_result {
  std::vector<call> calls;
  std::string device_a, device_b;
  std::uint64_t compute_waits = 0;      ///< both models' compute lanes
  std::uint64_t compute_passes = 0;
  std::uint64_t transfer_passes = 0;
};

/// Loads both models, streams four requests into each at once, and stops them.
run_result run_both(const actors::engine_config& cfg) {
  caf::actor_system_config caf_cfg;
  caf_cfg.set("scheduler.max-threads", size_t{2});
  caf::actor_system sys{caf_cfg};
  call_log log;

  ipc::store_options options;
  options.limit_bytes = cfg.store.max_bytes;
  auto opened = actors::open_store(cfg.store, options, {});
  REQUIRE_MESSAGE(opened.has_value(), (opened ? std::string{} : opened.error()));
  std::shared_ptr<ipc::snapshot_store> store{std::move(opened->store)};
  actors::instance_context ctx;
  ctx.sys = &sys;
  ctx.store = store;
  ctx.on_failure = [](std::string_view, std::string_view) {};
  ctx.make_backend = [&log](std::string name, const backends::backend_config& b)
    -> expected<std::unique_ptr<backends::backend>, backends::backend_error> {
    auto inner = backends::make_backend(name, b);
    if (!inner)
      return unexpected(std::move(inner).error());
    return std::make_unique<recording_backend>(std::move(*inner), std::move(name), log);
  };

  std::vector<std::shared_ptr<actors::model_entry>> models;
  for (std::uint32_t i = 0; i < cfg.models.size(); ++i) {
    REQUIRE(store->register_model(i, 0, 0).has_value());
    auto m = actors::load_model_instance(ctx, cfg, i);
    REQUIRE_MESSAGE(m.has_value(), (m ? std::string{} : m.error()));
    models.push_back(std::move(*m));
  }

  std::vector<std::shared_ptr<actors::token_stream>> streams;
  actors::seq_id next_id = 1;
  for (int r = 0; r < 4; ++r)
    for (const auto& m : models) {
      auto sub = std::make_shared<actors::submission>();
      sub->id = next_id++;
      sub->client = "test";
      sub->fairness_unit = "test";
      for (int t = 0; t < 40; ++t)
        sub->prompt.push_back(static_cast<backends::token_id>('a' + (t + r) % 26));
      sub->sampling.max_tokens = 40;
      sub->sampling.token_limit = m->info.vocab_size;
      auto stream = std::make_shared<actors::token_stream>(sub->id, m->name, m->scheduler);
      sub->session = actors::spawn_session(sys, stream, clock_type::now(),
                                           {m->name, m->scheduler, m->health});
      caf::anon_send(m->scheduler, actors::submit_atom::value, std::move(sub));
      streams.push_back(std::move(stream));
    }
  for (auto& s : streams) {
    auto done = s->collect(30s);
    REQUIRE(done.has_value());
    REQUIRE(done->end.has_value());
    CHECK(done->end->reason == actors::end_reason::length);
  }

  run_result out;
  out.device_a = models[0]->device->name;
  out.device_b = models[1]->device->name;
  for (const auto& m : models)
    actors::stop_model_instance(sys, *m, "test over", true);
  for (const auto& m : models) {
    out.compute_waits += m->compute_heartbeat->device_wait.waits.load();
    out.compute_passes += m->compute_heartbeat->device_wait.passes.load();
    out.transfer_passes += m->transfer_heartbeat->device_wait.passes.load();
  }
  out.calls = log.calls();
  return out;
}

} // namespace

TEST_CASE("device sharing: two models on one device never run a backend call at the same time; "
          "on two devices they do") {
  const auto shared = run_both(two_models("", ""));
  CHECK(shared.device_a == "sim");
  CHECK(shared.device_b == "sim");
  REQUIRE(shared.calls.size() > 20);
  CHECK(shared.compute_passes >= 20);
  CHECK_FALSE(models_overlap(shared.calls, call_kind::step));
  CHECK_FALSE(models_overlap(shared.calls, call_kind::transfer));
  // Both streamed at once, so one often found the other stepping.
  CHECK(shared.compute_waits > 0);
  const auto transfers = std::count_if(shared.calls.begin(), shared.calls.end(),
                                       [](const call& c) { return c.kind == call_kind::transfer; });
  CHECK(static_cast<std::uint64_t>(transfers) == shared.transfer_passes);

  const auto apart = run_both(two_models("npu0", "npu1"));
  CHECK(apart.device_a == "npu0");
  CHECK(apart.device_b == "npu1");
  // The same load on two devices overlaps: the check above can fail.
  CHECK(models_overlap(apart.calls, call_kind::step));
  // Each compute gate has one user: nobody ever waits.
  CHECK(apart.compute_waits == 0);
}
