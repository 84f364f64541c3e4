// kvlane-schedbench — what one scheduling event costs as the live queue grows.
//
// The scheduler actor keeps its live sequences in a rank index (rank_index)
// and an aging queue (aging_queue), updated per change, and runs a decision
// round after events: the best plan_target_size sequences from the index plus
// the residents, in rank order, to the slot planner (plan_slots), then the
// next step from the slot holders (compose_step). This program runs the same
// pure units in the same way, without an actor system or a backend, and
// prints the mean time per event and its ratio to the smallest size, for
//  - a submit burst: N submits into an idle model, planned once at the end
//    (the actor plans a burst of submits queued together once);
//  - single events at N live sequences: a submit, a step's end (its rows
//    charged, waiting sequences aged) and a cancel in turn, each followed by
//    its own round (the queue stays at N).
// Goodput's demotion runs as in the actor (docs/scheduling.md "Demotion"):
// every waiting sequence is watched in a demotion queue until its first
// token, checked once when its slack would run out, then demoted (one
// re-key) or watched again. The clock is simulated: --event-ms per event,
// and the sequences filled before the timed events arrived over the
// preceding --spread-ms, so interactive ones run out of slack during the run.
// The last line compares the largest size with the smallest against the
// goal (docs/benchmarks.md): per event within 2x, for both.
//
// Each figure is the best of --repeat runs (the machine is shared and noisy).
//
//   kvlane-schedbench [--sizes 100,1000,10000] [--events 3000] [--repeat 3] [--slots 16]
//                     [--clients 50] [--quantum 64] [--aging 2048]
//                     [--event-ms 1] [--spread-ms 4000]
//
// --quantum and --aging set the [scheduler] knobs quantum_steps and
// aging_steps (default: the daemon's defaults). With a short aging period
// most waiting sequences return to level 0 during the run, each a re-key.

#include "actors/aging_queue.hpp"
#include "actors/demotion_queue.hpp"
#include "actors/mlfq_policy.hpp"
#include "actors/policy.hpp"
#include "actors/rank_index.hpp"
#include "actors/slot_planner.hpp"
#include "actors/step_composer.hpp"

#include <fmt/core.h>

#include <algorithm>
#include <charconv>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

using namespace kvlane::actors;

namespace {

struct options {
  std::vector<std::size_t> sizes{100, 1000, 10000};
  std::size_t events = 3000;
  std::size_t repeat = 3; ///< each figure is the best of this many runs
  std::uint32_t slots = 16;
  std::uint32_t clients = 50;
  /// The daemon's default [scheduler] knobs (etc/kvlane.toml) unless set.
  scheduler_policy knobs{};
  std::size_t event_ms = 1;     ///< simulated time per event
  std::size_t spread_ms = 4000; ///< the prefilled queue's arrivals span this much before 0
  slo_targets slo{};            ///< the daemon's default [scheduler.slo]
};

using sim_clock = demotion_queue::time_point;

struct live_sequence {
  seq_id id = 0;
  std::string client;
  mlfq_position position;
  kv_state state = kv_state::queued;
  std::optional<slot_id> slot;
  std::uint32_t kv_len = 0;
  std::uint32_t length = 0;
  sim_clock arrived{};
  bool first_token = false;
};

/// One model's sequences and slots, driven like the scheduler actor drives
/// the pure units.
class model {
public:
  model(const options& opt)
    : knobs_(opt.knobs), slo_(opt.slo), policy_({rank_order::mlfq, false, prefill_chunk},
                                {knobs_.quantum_steps, knobs_.levels, knobs_.aging_steps}),
      ranks_(rank_order::mlfq), owners_(opt.slots), clients_(opt.clients) {}

  void set_now(sim_clock now) noexcept { now_ = now; }

  void submit() {
    live_sequence s;
    s.id = next_id_++;
    s.arrived = now_;
    s.client = "client-" + std::to_string(s.id % clients_);
    auto cls = s.id % 4 == 0 ? priority_class::interactive : priority_class::batch;
    s.length = 20 + static_cast<std::uint32_t>(s.id * 37 % 400);
    s.position = policy_.enter(cls, s.length);
    ranks_.insert(s.id, s.position, s.client);
    aging_.enter(s.id, s.position.level > 0);
    demotions_.watch(s.id, s.arrived); // checked at once, as the actor does at submit
    index_[s.id] = seqs_.size();
    seqs_.push_back(std::move(s));
  }

  /// Cancels the `k`-th sequence without a slot, counting from the newest.
  void cancel_waiting(std::size_t k) {
    for (std::size_t i = seqs_.size(); i-- > 0;) {
      if (seqs_[i].slot || k-- > 0)
        continue;
      ranks_.erase(seqs_[i].id);
      aging_.leave(seqs_[i].id);
      demotions_.forget(seqs_[i].id);
      index_.erase(seqs_[i].id);
      if (i + 1 != seqs_.size()) {
        seqs_[i] = std::move(seqs_.back());
        index_[seqs_[i].id] = i;
      }
      seqs_.pop_back();
      return;
    }
  }

  /// A step's end: every resident ran one row and is charged for it (it may
  /// drop a level), then the waiting sequences age.
  void end_step() {
    std::vector<seq_id> residents;
    for (auto& owner : owners_) {
      if (!owner)
        continue;
      auto& s = find(*owner);
      s.kv_len = std::min(s.kv_len + prefill_chunk, s.length);
      if (s.kv_len == s.length && !s.first_token) {
        s.first_token = true; // a sequence with its first token is never demoted
        demotions_.forget(s.id);
      }
      const auto before = s.position;
      policy_.charge_step(s.position);
      if (s.position.level != before.level || s.position.turn != before.turn) {
        ranks_.update(s.id, s.position);
        aging_.set_above_top(s.id, s.position.level > 0 || s.position.demoted);
      }
      residents.push_back(s.id);
    }
    for (auto id : aging_.step(residents, knobs_.aging_steps)) {
      auto& s = find(id);
      mlfq_policy::return_to_top(s.position);
      ranks_.update(id, s.position);
    }
  }

  /// The round the actor runs after an event. Returns the rows composed, so
  /// the work cannot be optimized away.
  std::size_t decide() {
    demote_hopeless();
    const auto target = plan_target_size(owners_.size(), knobs_.spare_slots, true);
    auto order = ranks_.best(target);
    std::vector<seq_id> others;
    std::uint32_t dumping = 0;
    for (auto& owner : owners_) {
      if (!owner)
        continue;
      auto& s = find(*owner);
      dumping += s.state == kv_state::dumping;
      if (s.state == kv_state::resident
          && std::find(order.begin(), order.end(), s.id) == order.end())
        others.push_back(s.id);
    }
    ranks_.sort(others);
    order.insert(order.end(), others.begin(), others.end());

    std::vector<slot_candidate> candidates;
    candidates.reserve(order.size());
    for (auto id : order) {
      auto& s = find(id);
      candidates.push_back({s.id, s.state, s.slot, false, s.kv_len == 0});
    }
    slot_plan_input in;
    in.ranked = candidates;
    in.owners = owners_;
    in.dumping = dumping;
    in.spare_slots = knobs_.spare_slots;
    actions act{*this};
    plan_slots(in, act);

    std::vector<step_candidate> residents;
    for (auto& owner : owners_) {
      if (!owner)
        continue;
      auto& s = find(*owner);
      if (s.state == kv_state::resident && s.kv_len < s.length)
        residents.push_back({s.id, &s.position, s.kv_len, s.length});
    }
    const step_limits limits{knobs_.max_step_tokens, prefill_chunk, knobs_.batch_prefill_yields,
                             std::nullopt};
    return compose_step(residents, limits).size() + order.size();
  }

  std::size_t size() const noexcept { return seqs_.size(); }
  std::uint64_t demoted() const noexcept { return demoted_; }

private:
  class actions final : public slot_actions {
  public:
    explicit actions(model& m) : m_(m) {}
    kv_state admit(seq_id id, slot_id slot) override {
      auto& s = m_.find(id);
      s.slot = slot;
      m_.owners_[slot] = id;
      return s.state = kv_state::resident;
    }
    kv_state evict(seq_id id, eviction) override {
      // Recompute: the slot is free at once, so every round has work to do.
      auto& s = m_.find(id);
      m_.owners_[*s.slot].reset();
      s.slot.reset();
      return s.state = kv_state::queued;
    }

  private:
    model& m_;
  };

  live_sequence& find(seq_id id) { return seqs_[index_.at(id)]; }

  /// The actor's demotion pass (actors/plan_candidates demote_hopeless): the
  /// due sequences are judged with their slack (here the objective less the
  /// wait and a prefill of 0.05 ms per token) and demoted or watched again.
  void demote_hopeless() {
    for (auto id : demotions_.due(now_)) {
      auto& s = find(id);
      if (s.first_token || s.position.demoted)
        continue;
      const double waited = std::chrono::duration<double, std::milli>(now_ - s.arrived).count();
      const double ttft = slo_.of(s.position.cls).ttft_ms;
      const double slack = ttft - waited - 0.05 * s.length;
      const auto v = judge_demotion(slack, waited, ttft);
      if (v.demote) {
        s.position.demoted = true;
        ranks_.update(id, s.position);
        aging_.set_above_top(id, true);
        ++demoted_;
      } else {
        demotions_.watch(id, now_ + std::chrono::duration_cast<sim_clock::duration>(
                                      std::chrono::duration<double, std::milli>(v.recheck_in_ms)));
      }
    }
  }

  static constexpr std::uint32_t prefill_chunk = 32;

  scheduler_policy knobs_;
  slo_targets slo_;

  mlfq_policy policy_;
  rank_index ranks_;
  aging_queue aging_;
  demotion_queue demotions_;
  sim_clock now_{};
  std::uint64_t demoted_ = 0;
  std::vector<live_sequence> seqs_;
  std::unordered_map<seq_id, std::size_t> index_;
  std::vector<std::optional<seq_id>> owners_;
  std::uint32_t clients_;
  seq_id next_id_ = 0;
};

std::optional<std::vector<std::size_t>> parse_sizes(std::string_view text) {
  std::vector<std::size_t> out;
  while (!text.empty()) {
    auto comma = text.find(',');
    auto item = text.substr(0, comma);
    std::size_t v = 0;
    auto [end, ec] = std::from_chars(item.data(), item.data() + item.size(), v);
    if (ec != std::errc{} || end != item.data() + item.size() || v == 0)
      return std::nullopt;
    out.push_back(v);
    text = comma == std::string_view::npos ? std::string_view{} : text.substr(comma + 1);
  }
  if (out.empty())
    return std::nullopt;
  return out;
}

std::optional<std::uint64_t> parse_count(std::string_view text) {
  std::uint64_t v = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (ec != std::errc{} || end != text.data() + text.size() || v == 0 || v > 1'000'000)
    return std::nullopt;
  return v;
}

int usage(std::string_view why) {
  fmt::print(stderr,
             "kvlane-schedbench: {}\nusage: kvlane-schedbench [--sizes N,N,...] [--events N] "
             "[--repeat N] [--slots N] [--clients N] [--quantum N] [--aging N] "
             "[--event-ms N] [--spread-ms N]\n",
             why);
  return 2;
}

} // namespace

int main(int argc, char** argv) {
  options opt;
  for (int i = 1; i < argc; ++i) {
    std::string_view arg = argv[i];
    if (arg == "--help")
      return usage("what one scheduling event costs at each live-queue size");
    if (i + 1 >= argc)
      return usage(fmt::format("{} needs a value", arg));
    std::string_view value = argv[++i];
    if (arg == "--sizes") {
      auto sizes = parse_sizes(value);
      if (!sizes)
        return usage("--sizes: a comma-separated list of positive integers");
      opt.sizes = *sizes;
    } else if (auto n = parse_count(value); !n) {
      return usage(fmt::format("{}: a positive integer up to 1000000", arg));
    } else if (arg == "--events") {
      opt.events = *n;
    } else if (arg == "--repeat") {
      opt.repeat = *n;
    } else if (arg == "--slots") {
      opt.slots = static_cast<std::uint32_t>(*n);
    } else if (arg == "--clients") {
      opt.clients = static_cast<std::uint32_t>(*n);
    } else if (arg == "--quantum") {
      opt.knobs.quantum_steps = static_cast<std::uint32_t>(*n);
    } else if (arg == "--aging") {
      opt.knobs.aging_steps = static_cast<std::uint32_t>(*n);
    } else if (arg == "--event-ms") {
      opt.event_ms = *n;
    } else if (arg == "--spread-ms") {
      opt.spread_ms = *n;
    } else {
      return usage(fmt::format("unknown option {}", arg));
    }
  }

  using clock = std::chrono::steady_clock;
  auto us_since = [](clock::time_point start, std::size_t events) {
    return std::chrono::duration<double, std::micro>(clock::now() - start).count()
           / double(events);
  };
  std::size_t sink = 0;

  fmt::print("submit burst: N submits into an idle model of {} slots, one round at the end\n",
             opt.slots);
  fmt::print("{:>10} {:>14} {:>12}\n", "burst", "us per event", "vs first");
  double first = 0;
  double burst_ratio = 0; // the largest size against the smallest
  for (auto n : opt.sizes) {
    double us = 0;
    for (std::size_t r = 0; r < opt.repeat; ++r) {
      model m{opt};
      auto start = clock::now();
      while (m.size() < n)
        m.submit();
      sink += m.decide();
      auto run = us_since(start, n);
      us = r == 0 ? run : std::min(us, run);
    }
    if (first == 0)
      first = us;
    fmt::print("{:>10} {:>14.3f} {:>11.1f}x\n", n, us, us / first);
    burst_ratio = us / first;
  }

  fmt::print("\nsingle events at N live sequences, one round each (a submit, a step's end, "
             "a cancel in turn)\n");
  fmt::print("{:>10} {:>14} {:>12} {:>10}\n", "live seqs", "us per event", "vs first", "demoted");
  first = 0;
  double single_ratio = 0;
  const auto at_ms = [](double ms) {
    return sim_clock{} + std::chrono::duration_cast<sim_clock::duration>(
                           std::chrono::duration<double, std::milli>(ms));
  };
  for (auto n : opt.sizes) {
    double us = 0;
    std::uint64_t demoted = 0;
    for (std::size_t r = 0; r < opt.repeat; ++r) {
      model m{opt};
      // The queue arrived over the spread before the timed events start at `spread`.
      while (m.size() < n) {
        m.set_now(at_ms(double(opt.spread_ms) * double(m.size()) / double(n)));
        m.submit();
      }
      m.set_now(at_ms(double(opt.spread_ms)));
      sink += m.decide(); // settle the slots and the first demotion checks before timing
      const auto settled = m.demoted();
      auto start = clock::now();
      for (std::size_t e = 0; e < opt.events; ++e) {
        m.set_now(at_ms(double(opt.spread_ms + e * opt.event_ms)));
        switch (e % 3) {
          case 0: m.submit(); break;
          case 1: m.end_step(); break;
          default: m.cancel_waiting(e % 7); break;
        }
        sink += m.decide();
      }
      auto run = us_since(start, opt.events);
      us = r == 0 ? run : std::min(us, run);
      demoted = m.demoted() - settled;
    }
    if (first == 0)
      first = us;
    fmt::print("{:>10} {:>14.2f} {:>11.1f}x {:>10}\n", n, us, us / first, demoted);
    single_ratio = us / first;
  }

  // The goal: one event costs about the same whatever the queue's length.
  constexpr double goal = 2.0;
  const double ratio = std::max(burst_ratio, single_ratio);
  fmt::print("\n[ {} ] per_event_{}_vs_{} {:.2f} (<= {:g}; the larger of the submit burst's "
             "{:.2f} and the single events' {:.2f})\n",
             ratio <= goal ? "PASS" : "FAIL", opt.sizes.back(), opt.sizes.front(), ratio, goal,
             burst_ratio, single_ratio);
  return sink == 0 ? EXIT_FAILURE : EXIT_SUCCESS; // rows were composed every round
}
