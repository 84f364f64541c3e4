#pragma once

// kvlane::actors::cost_model — what a step, a dump and a load cost, learned
// online from measured times, and the swap-or-recompute decision built on it.
//
// Step time is fitted as base + per_token * tokens by exponentially weighted
// least squares (weight alpha on each new sample). The per-token cost is only
// identifiable while the token counts of recent steps differ; through a run of
// alike steps (a steady state of decode rows, where the old spread has decayed
// away) the last per-token cost identified is kept, and the base follows the
// mean step time under it. Dump and load times are
// exponentially weighted averages of milliseconds per byte. Until a figure has
// been measured it is unknown and the decision falls back to swapping, which
// then measures it.
//
// Threading: a plain value owned by one scheduler actor.

#include <cstdint>
#include <optional>

namespace kvlane::actors {

/// Cost figures given instead of measured (scheduler_policy::fixed_costs).
struct cost_figures {
  double step_base_ms = 0;
  double step_per_token_ms = 0;
  double dump_ms_per_mib = 0;
  double load_ms_per_mib = 0;

  friend bool operator==(const cost_figures&, const cost_figures&) = default;
};

class cost_model {
public:
  explicit cost_model(double alpha = 0.2);

  /// Uses `f` from now on and ignores what is observed (nullopt: measure
  /// again, from what was learned before). For runs whose swap-or-recompute
  /// decisions must not depend on the host's timing noise: tests, and
  /// benchmarks that compare policies rather than the model.
  void fix(std::optional<cost_figures> f) noexcept { fixed_ = f; }

  /// Changes the weight of new samples; what was learned is kept.
  void set_alpha(double alpha) noexcept { alpha_ = alpha; }

  void observe_step(std::uint32_t tokens, double ms);
  void observe_dump(std::uint64_t bytes, double ms);
  void observe_load(std::uint64_t bytes, double ms);

  std::optional<double> step_base_ms() const;
  std::optional<double> step_per_token_ms() const;
  std::optional<double> dump_ms(std::uint64_t bytes) const;
  std::optional<double> load_ms(std::uint64_t bytes) const;

  /// Estimated cost of re-prefilling `tokens` tokens (their share of steps).
  std::optional<double> recompute_ms(std::uint32_t tokens) const;

  /// Estimated cost of bringing a snapshot of `bytes` back: its load, plus its
  /// dump when the dump stalls compute (sync mode).
  std::optional<double> swap_ms(std::uint64_t bytes, bool dump_exposed) const;

  /// True when recomputing `tokens` tokens is cheaper than swapping a snapshot
  /// of `bytes`. A swap must win by a margin (it costs memory and can fail),
  /// so recompute wins when recompute_ms <= swap_ms / 0.9. Unknown figures → false.
  bool prefer_recompute(std::uint32_t tokens, std::uint64_t bytes, bool dump_exposed) const;

private:
  double alpha_;
  // Exponentially weighted sums for the step fit.
  double s0_ = 0, sx_ = 0, sy_ = 0, sxx_ = 0, sxy_ = 0;
  std::optional<double> per_token_ms_; ///< the last slope the fit identified
  std::optional<double> dump_ms_per_byte_;
  std::optional<double> load_ms_per_byte_;
  std::optional<cost_figures> fixed_;
};

} // namespace kvlane::actors
