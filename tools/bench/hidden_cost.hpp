#pragma once

// kvlane::tools::bench — hidden_cost: the share of a run's transfer time that
// cost nothing, i.e. did not lengthen a step or delay an admission.
//
// Problem it solves: a transfer that runs while a step runs is not hidden if
// the step ran slower for it (a device that splits bandwidth, `shared`), and
// counting co-occurrence (what the scheduler's overlap_meter reports) calls
// it hidden anyway. Here a transfer's exposed cost is
//   - the part of its time no step covered (the compute lane waited: an
//     admission or the next step was held back), plus
//   - the time steps were lengthened: measured step time beyond the modeled
//     step time, after the host overhead that `free-transfer` (same engine,
//     transfers free) shows on the same machine is taken out.
// hidden = 1 - exposed / transfer time, clamped to [0, 1]; NaN when no
// transfer ran or a figure is missing.
//
// All inputs are simulated milliseconds. Pure: values in, value out.

namespace kvlane::tools::bench {

struct hidden_cost_input {
  double transfer_ms = 0;        ///< dump + load time
  double covered_ms = 0;         ///< transfer time during which a step ran
  double step_busy_ms = 0;       ///< measured step time of the run
  double modeled_step_ms = 0;    ///< the sim's step time for the same steps without transfers
  double reference_stretch = 1;  ///< free-transfer's measured / modeled step time (host overhead)
  bool serialized = false;       ///< transfers ran on the compute lane: nothing is hidden
};

/// The share of transfer time that was hidden (see above).
double hidden_cost_share(const hidden_cost_input& in);

} // namespace kvlane::tools::bench
