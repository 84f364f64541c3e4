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
// The last line compares the largest size with the smallest against the
// goal (docs/benchmarks.md): per event within 2x, for both.
//
// Each figure is the best of --repeat runs (the machine is shared and noisy).
//
//   kvlane-schedbench [--sizes 100,1000,10000] [--events 3000] [--repeat 3] [--slots 16]
//                     [--clients 50] [--quantum 64] [--aging 2048]
//
// --quantum and --aging set the [scheduler] knobs quantum_steps and
// aging_steps (default: the daemon's defaults). With a short aging period
// most waiting sequences return to level 0 during the run, each a re-key.

#include "actors/aging_queue.hpp"
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
};

struct live_sequence {
  seq_id id = 0;
  std::string client;
  mlfq_position position;
  kv_state state = kv_state::queued;
  std::optional<slot_id> slot;
  std::uint32_t kv_len = 0;
  std::uint32_t length = 0;
};

/// One model's sequences and slots, driven like the scheduler actor drives
/// the pure units.
class model {
public:
  model(const options& opt)
    : knobs_(opt.knobs), policy_({rank_order::mlfq, false, prefill_chunk},
                                {knobs_.quantum_steps, knobs_.levels, knobs_.aging_steps}),
      ranks_(rank_order::mlfq), owners_(opt.slots), clients_(opt.clients) {}

  void submit() {
    live_sequence s;
    s.id = next_id_++;
    s.client = "client-" + std::to_string(s.id % clients_);
    auto cls = s.id % 4 == 0 ? priority_class::interactive : priority_class::batch;
    s.length = 20 + static_cast<std::uint32_t>(s.id * 37 % 400);
    s.position = policy_.enter(cls, s.length);
    ranks_.insert(s.id, s.position, s.client);
    aging_.enter(s.id, s.position.level > 0);
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
      const auto before = s.position;
      policy_.charge_step(s.position);
      if (s.position.level != before.level || s.position.turn != before.turn) {
        ranks_.update(s.id, s.position);
        aging_.set_above_top(s.id, s.position.level > 0);
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
    const step_limits limits{knobs_.max_step_tokens, prefill_chunk, knobs_.batch_prefill_yields};
    return compose_step(residents, limits).size() + order.size();
  }

  std::size_t size() const noexcept { return seqs_.size(); }

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

  static constexpr std::uint32_t prefill_chunk = 32;

  scheduler_policy knobs_;

  mlfq_policy policy_;
  rank_index ranks_;
  aging_queue aging_;
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
             "[--repeat N] [--slots N] [--clients N] [--quantum N] [--aging N]\n",
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
  fmt::print("{:>10} {:>14} {:>12}\n", "live seqs", "us per event", "vs first");
  first = 0;
  double single_ratio = 0;
  for (auto n : opt.sizes) {
    double us = 0;
    for (std::size_t r = 0; r < opt.repeat; ++r) {
      model m{opt};
      while (m.size() < n)
        m.submit();
      sink += m.decide(); // settle the slots before timing
      auto start = clock::now();
      for (std::size_t e = 0; e < opt.events; ++e) {
        switch (e % 3) {
          case 0: m.submit(); break;
          case 1: m.end_step(); break;
          default: m.cancel_waiting(e % 7); break;
        }
        sink += m.decide();
      }
      auto run = us_since(start, opt.events);
      us = r == 0 ? run : std::min(us, run);
    }
    if (first == 0)
      first = us;
    fmt::print("{:>10} {:>14.2f} {:>11.1f}x\n", n, us, us / first);
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
