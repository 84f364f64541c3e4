#include "tools/bench/bench_runner.hpp"
#include "tools/bench/run_collector.hpp"

#include "actors/engine.hpp"
#include "common/elapsed.hpp"
#include "common/random.hpp"

#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <mutex>
#include <thread>

namespace kvlane::tools::bench {

namespace {

using clock = std::chrono::steady_clock;

class bench_sink final : public actors::stream_sink {
public:
  bench_sink(std::shared_ptr<run_collector> c, std::size_t index) : c_(std::move(c)), index_(index) {}

  void on_tokens(std::span<const backends::token_id>) override {}

  void on_end(const actors::stream_end& end) override {
    c_->end(index_, clock::now(), [&](request_outcome& o, double ts) {
      o.reason = end.reason;
      o.error = end.message;
      o.generated = end.generated_tokens;
      o.preemptions = end.preemptions;
      if (end.generated_tokens > 0)
        o.ttft_ms = end.ttft_ms * ts;
      if (end.generated_tokens > 1)
        o.tpot_ms = end.tpot_ms * ts;
      o.e2e_ms = end.e2e_ms * ts;
    });
  }

private:
  std::shared_ptr<run_collector> c_;
  std::size_t index_;
};

} // namespace

std::vector<backends::token_id> synthetic_prompt(std::uint32_t index, std::uint32_t length) {
  std::vector<backends::token_id> out(length);
  // Letters with a space every few tokens (plausible text for the byte
  // tokenizer), drawn from a generator seeded by the index: prompts of
  // different requests share no prefix worth reusing.
  std::uint64_t state = std::uint64_t{index} << 32;
  for (std::uint32_t k = 0; k < length; ++k) {
    const auto z = splitmix64(state);
    const bool space = (k + index) % 6 == 5;
    out[k] = space ? backends::token_id{' '} : static_cast<backends::token_id>('a' + z % 26);
  }
  return out;
}

std::vector<backends::token_id> prompt_of(const trace_request& r, std::uint32_t index) {
  if (!r.prompt)
    return synthetic_prompt(index, r.prompt_tokens);
  const auto n = std::min<std::size_t>(r.prompt_tokens, r.prompt->size());
  return {r.prompt->begin(), r.prompt->begin() + static_cast<std::ptrdiff_t>(n)};
}

held_turns_figures held_turns_of(std::span<const request_outcome> outcomes) {
  held_turns_figures h;
  double total = 0;
  for (const auto& o : outcomes)
    if (o.held_ms > 0) {
      ++h.count;
      total += o.held_ms;
    }
  h.mean_ms = h.count > 0 ? total / static_cast<double>(h.count) : 0;
  return h;
}

void note_unsent(std::vector<request_outcome>& outcomes) {
  for (auto& o : outcomes)
    if (!o.submitted && o.error.empty())
      o.error = "not sent: the run's time bound passed before its previous turn ended";
}

std::vector<request_outcome> planned_outcomes(std::span<const trace_request> requests) {
  std::vector<request_outcome> out(requests.size());
  for (std::size_t i = 0; i < requests.size(); ++i) {
    auto& o = out[i];
    o.index = static_cast<std::uint32_t>(i);
    o.interactive = requests[i].interactive;
    o.prompt_tokens = requests[i].prompt_tokens;
    o.output_tokens = requests[i].output_tokens;
    o.arrival_s = requests[i].arrival_s;
  }
  return out;
}

expected<run_result, std::string> run_mode(const run_options& opts, actors::scheduler_mode mode,
                                           std::span<const trace_request> requests) {
  auto cfg = opts.cfg;
  cfg.scheduler.mode = mode;
  if (cfg.models.empty())
    return unexpected(std::string{"the configuration has no model"});
  const std::vector<std::string> names =
    !opts.models.empty() ? opts.models
                         : std::vector<std::string>{opts.model.empty() ? cfg.models.front().name
                                                                       : opts.model};
  const std::string& model = names.front();
  for (std::size_t i = 0; i < requests.size(); ++i)
    if (requests[i].model >= names.size())
      return unexpected(fmt::format("request {} is for model index {}, but the run has {} "
                                    "model(s)",
                                    i, requests[i].model, names.size()));
  const double ts = opts.time_scale > 0 ? opts.time_scale : 1.0;

  run_result result;
  result.mode = mode;
  result.time_scale = ts;
  result.requests = planned_outcomes(requests);

  caf::actor_system_config caf_cfg;
  const auto threads = cfg.daemon.worker_threads != 0
                         ? cfg.daemon.worker_threads
                         : std::max(1u, std::thread::hardware_concurrency());
  caf_cfg.set("scheduler.max-threads", static_cast<std::size_t>(threads));
  caf::actor_system sys{caf_cfg};
  auto created = actors::engine::create(sys, cfg);
  if (!created)
    return unexpected(std::move(created).error());
  auto engine = std::move(*created);
  std::vector<std::shared_ptr<const actors::model_entry>> entries;
  for (const auto& name : names) {
    auto e = engine->find_model(name);
    if (!e)
      return unexpected(fmt::format("no model named '{}' in the configuration", name));
    entries.push_back(e);
    result.models.push_back(model_run{name, {}, 0});
  }
  const auto* entry = entries.front().get();
  result.serialized =
    actors::place_transfers(mode, entry->info.caps.transfer_overlaps_compute).on_compute_lane;

  auto col = std::make_shared<run_collector>();
  col->outcomes = &result.requests;
  col->time_scale = ts;

  // Samples the store's occupancy and the scheduler's gauges until stopped.
  std::atomic<bool> sampling{true};
  const auto start = clock::now();
  gauge_recorder gauges{start, ts};
  std::thread sampler{[&] {
    auto next_gauge = clock::now();
    while (sampling.load(std::memory_order_acquire)) {
      auto ss = engine->store_stats(); // the store keeps exact peaks
      result.peak_store_bytes = ss.peak_used_bytes;
      result.peak_snapshots = ss.peak_snapshots;
      result.peak_committed_bytes = std::max(result.peak_committed_bytes, ss.committed_bytes);
      for (std::size_t m = 0; m < entries.size(); ++m)
        for (const auto& u : ss.models)
          if (u.model_index == entries[m]->index)
            result.models[m].peak_store_bytes =
              std::max(result.models[m].peak_store_bytes, u.used_bytes);
      if (clock::now() >= next_gauge) {
        next_gauge += std::chrono::milliseconds(100);
        if (auto st = engine->stats(model, std::chrono::seconds(2)))
          gauges.add(*st, clock::now(), result.timeline, result.peak_without_slot);
      }
      std::this_thread::sleep_for(opts.sample_interval);
    }
  }};

  // The wall bound on the run: sending and waiting for the ends.
  auto bound = opts.timeout;
  if (bound.count() == 0) {
    const double span_ms = requests.empty() ? 0 : requests.back().arrival_s * 1000.0 / ts;
    bound = std::chrono::milliseconds(60000 + static_cast<std::int64_t>(4 * span_ms));
  }

  // The driver: every request at its arrival time, a held turn when its
  // previous turn ends (turn_gate).
  col->start = start;
  col->last_end = start;
  col->gate = std::make_shared<turn_gate>(requests, start, ts);
  std::size_t submitted = 0;
  while (const auto next = col->gate->next(start + bound)) {
    const std::size_t i = next->index;
    const auto& r = requests[i];
    result.max_submit_lag_ms = std::max(result.max_submit_lag_ms, ms_between(next->due, clock::now()));
    actors::submit_request req;
    req.model = names[r.model];
    req.client = "bench";
    req.owner = r.owner;
    req.priority = r.interactive ? actors::priority_class::interactive
                                 : actors::priority_class::batch;
    req.prompt_tokens = prompt_of(r, static_cast<std::uint32_t>(i));
    req.sampling.max_tokens = r.output_tokens;
    req.stop_at_eos = false;
    auto sink = std::make_shared<bench_sink>(col, i);
    auto id = engine->submit(std::move(req), sink);
    if (col->sent(i, r, *next,
                  id ? std::string{}
                     : fmt::format("submit failed: {} ({})", id.error().message,
                                   actors::to_string(id.error().code))))
      ++submitted;
  }
  note_unsent(result.requests);
  if (opts.progress)
    opts.progress(fmt::format("{}: all {} requests submitted ({} accepted), waiting for the ends",
                              actors::to_string(mode), requests.size(), submitted));

  // Wait for every accepted request to end, within the bound.
  {
    std::unique_lock lock{col->mutex};
    result.timed_out =
      !col->cv.wait_until(lock, start + bound, [&] { return col->ended >= submitted; });
  }
  if (result.timed_out) {
    if (opts.progress)
      opts.progress(fmt::format("{}: timed out after {} s with {} of {} requests ended; "
                                "cancelling the rest",
                                actors::to_string(mode), bound.count() / 1000, col->ended,
                                submitted));
    engine->shutdown("benchmark timeout");
    std::unique_lock lock{col->mutex};
    col->cv.wait_for(lock, std::chrono::seconds(10), [&] { return col->ended >= submitted; });
  }

  sampling.store(false, std::memory_order_release);
  sampler.join();
  {
    std::lock_guard lock{col->mutex};
    result.wall_ms = ms_between(start, col->last_end);
  }
  for (auto& m : result.models) {
    if (auto st = engine->stats(m.name, std::chrono::seconds(10)))
      m.stats = *st;
    else if (!result.timed_out)
      return unexpected(fmt::format("model '{}': scheduler statistics unavailable: {}", m.name,
                                    st.error()));
  }
  result.stats = result.models.front().stats;
  result.store = engine->store_stats();
  result.retained_evictions = result.store.retained_evictions;
  for (std::size_t m = 0; m < entries.size(); ++m)
    for (const auto& u : result.store.models)
      if (u.model_index == entries[m]->index)
        result.models[m].retained_evictions = u.retained_evictions;
  result.mean_slots_busy = gauges.mean_slots_busy();
  if (entry->info.kind == "sim") {
    // Every step pays the base cost; every token carried pays the per-token
    // cost once: prefill tokens, and one decode token per generated token
    // after each sequence's first (which its last prefill chunk produced).
    const auto& sim = cfg.models[entry->index].backend.sim;
    const auto& st = result.stats;
    const double decode_rows = static_cast<double>(st.tokens_generated)
                               - static_cast<double>(st.finished + st.failed + st.cancelled);
    result.modeled_step_busy_ms =
      static_cast<double>(st.steps) * sim.step_base_ms
      + (static_cast<double>(st.prefill_tokens) + std::max(0.0, decode_rows)) * sim.step_per_token_ms;
  }
  engine.reset();
  {
    // Sinks may still be referenced by actors being torn down; they only
    // touch `result` under the collector's lock, and every one has ended.
    std::lock_guard lock{col->mutex};
    col->outcomes = nullptr;
  }
  return result;
}

void gauge_recorder::add(const actors::scheduler_stats& st,
                         std::chrono::steady_clock::time_point now,
                         std::vector<timeline_sample>& timeline,
                         std::uint32_t& peak_without_slot) {
  slots_busy_sum_ += st.slots_busy;
  ++samples_;
  peak_without_slot = std::max(peak_without_slot, st.queued + st.parked);
  timeline_sample t;
  t.t_s = std::chrono::duration<double>(now - start_).count() * time_scale_;
  t.slots_busy = st.slots_busy;
  t.resident = st.resident;
  t.queued = st.queued;
  t.parked = st.parked;
  t.without_slot_interactive = st.without_slot_interactive;
  t.without_slot_batch = st.without_slot_batch;
  const double dt = std::chrono::duration<double, std::milli>(now - last_).count();
  t.npu_busy = dt > 0 ? (st.step_busy_ms - last_busy_ms_) / dt : 0;
  t.tokens_generated = st.tokens_generated;
  t.preemptions = st.preemptions;
  last_ = now;
  last_busy_ms_ = st.step_busy_ms;
  timeline.push_back(t);
}

} // namespace kvlane::tools::bench
