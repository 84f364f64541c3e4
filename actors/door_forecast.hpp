#pragma once

// kvlane::actors::door_forecast — when a request that arrives now would get a
// slot, and whether it is refused at the door because it would miss its
// objective by far ([scheduler.slo] refuse_over).
//
// Problem it solves: under overload a request can wait many times its class's
// TTFT objective for a slot. A client told so at once can retry later, go
// elsewhere or shed load, instead of holding a connection for a first token
// that comes too late. The scheduler knows what waits and how fast slots are
// handed out; submit() has to decide on the caller's thread, without a round
// trip to the scheduler. So the scheduler publishes a few figures after each
// planning round (door_board) and submit() reads them.
//
// The forecast (predicted_start_ms): a request arriving now ranks after the
// waiting sequences ahead of it (door_ahead: those of its class at the top
// MLFQ level that are not demoted, since one that used up its quantum or is
// demoted ranks after a new request, and every waiting interactive one if it
// is batch; in arrival order, every waiting one). It
// gets a slot at once if more slots are open to it than sequences wait ahead
// of it (door_open: the free ones, and in a preemptive mode, for an
// interactive request, the ones batch sequences hold); otherwise once the ones
// ahead, less the open slots, have been given one, at the rate slots went to
// waiting sequences over the last grants (grant_meter). An estimate: it leaves
// out the request's own prefill (refusing does not shorten it), skip-join (a
// long prompt joins below the top level, behind more than it counts) and
// whether an eviction it would ask for pays; the rate counts slots, not the
// work they carry (docs/benchmarks.md measures how far off it is). So a
// refusal also needs evidence: the class's recent requests waited past the
// limit for their first slot (the median of the last wait_window::size, with
// at least wait_window::min_waits of them); where slots turn over fast and the
// forecast over-predicts, they did not. With fewer than
// grant_meter::min_grants grants measured there is no forecast, and nothing
// is refused.
//
// Pure but for door_board (values in, figures out; no clock). Threading:
// grant_meter is owned by one scheduler; door_board is thread-safe.

#include "actors/messages.hpp"
#include "actors/slo.hpp"

#include <array>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <optional>

namespace kvlane::actors {

class sequence_table;

/// What the scheduler publishes for the door, per class where it differs.
struct door_figures {
  /// Per class (interactive, batch): slots a new request could take now.
  std::array<std::uint32_t, 2> open{};
  /// Per class: waiting sequences a new request ranks after.
  std::array<std::uint32_t, 2> ahead{};
  double grants_per_s = 0; ///< slots given to waiting sequences per second; 0: not measured
  /// Per class: a predicted start later than this is refused ([scheduler.slo] refuse_over
  /// times the class's TTFT objective); 0: never.
  std::array<double, 2> refuse_after_ms{};
  /// Per class: the median wait for a first slot of its recent requests, in ms.
  std::array<std::optional<double>, 2> recent_wait_ms{};

  friend bool operator==(const door_figures&, const door_figures&) = default;
};

/// When a request of class `cls` arriving now is expected to get a slot, in
/// milliseconds from now; nullopt while the grant rate is not measured.
std::optional<double> predicted_start_ms(const door_figures& f, priority_class cls) noexcept;

/// The refusal at the door: the predicted start of a request of class `cls`
/// when it and the class's recent waits are both past the class's limit;
/// nullopt admits it (no limit, no forecast, too few recent waits, or either
/// within the limit).
std::optional<double> door_refusal(const door_figures& f, priority_class cls) noexcept;

/// Per class: the waiting sequences of `table` a new request ranks after
/// (`by_class`: interactive before batch, and in its class those at the top
/// level that are not demoted, the MLFQ and priority orders; otherwise arrival
/// order, every waiting sequence).
std::array<std::uint32_t, 2> door_ahead(const sequence_table& table, bool by_class);

/// Per class: the slots a new request could take now: `free_slots`, and in a
/// `preemptive` mode, for an interactive one, those batch sequences hold.
std::array<std::uint32_t, 2> door_open(const sequence_table& table, std::uint32_t free_slots,
                                       bool preemptive);

/// The limit per class: `refuse_over` times its TTFT objective (0: never).
std::array<double, 2> door_limits(const slo_targets& slo, double refuse_over) noexcept;
/// Whether `limits` refuse anything.
inline bool door_refuses(const std::array<double, 2>& limits) noexcept {
  return limits[0] > 0 || limits[1] > 0;
}

class grant_meter;

/// What the figures depend on besides the table.
struct door_setup {
  bool by_class = true;   ///< the rank order puts interactive first (not fcfs)
  bool preemptive = true; ///< an interactive request may evict a batch one
  std::uint32_t free_slots = 0;
  std::array<double, 2> limits{}; ///< door_limits
};

/// The figures of `table` at `now`, with the grant rate `meter` measured (the
/// caller samples it, grant_meter::observe).
door_figures door_figures_of(const sequence_table& table, const grant_meter& meter,
                             std::chrono::steady_clock::time_point now, const door_setup& setup);

/// The rate at which slots go to waiting sequences, from the table's running
/// count of grants sampled at each planning round.
class grant_meter {
public:
  using time_point = std::chrono::steady_clock::time_point;
  /// Samples kept: the rate covers the last `window` rounds that granted slots.
  static constexpr std::size_t window = 32;
  /// Grants in the window before a rate is given.
  static constexpr std::uint64_t min_grants = 4;

  /// The table's count of grants at `now` (it only grows).
  void observe(time_point now, std::uint64_t total_grants);
  /// Grants per second from the oldest sample to `now` (so a rate decays while
  /// nothing is granted); 0 with fewer than min_grants grants in the window.
  double per_second(time_point now) const;

private:
  struct sample {
    time_point at;
    std::uint64_t total = 0;
  };
  std::array<sample, window> samples_{};
  std::size_t count_ = 0; ///< samples held (up to window)
  std::size_t next_ = 0;  ///< where the next sample goes
};

/// The last waits for a first slot of one class's requests.
class wait_window {
public:
  static constexpr std::size_t size = 8;
  static constexpr std::size_t min_waits = 4;

  void observe(double wait_ms) noexcept;
  /// The median of the waits held; nullopt with fewer than min_waits.
  std::optional<double> median() const;

private:
  std::array<double, size> waits_{};
  std::size_t count_ = 0;
  std::size_t next_ = 0;
};

/// The figures the scheduler last published, for submit() on any thread.
class door_board {
public:
  void publish(const door_figures& f) {
    std::lock_guard lock{mu_};
    figures_ = f;
  }
  door_figures read() const {
    std::lock_guard lock{mu_};
    return figures_;
  }
  /// One request refused (submit()); the count goes to the model's statistics.
  void count_refusal() noexcept { refused_.fetch_add(1, std::memory_order_relaxed); }
  std::uint64_t refusals() const noexcept { return refused_.load(std::memory_order_relaxed); }

private:
  mutable std::mutex mu_;
  door_figures figures_;
  std::atomic<std::uint64_t> refused_{0};
};

} // namespace kvlane::actors
