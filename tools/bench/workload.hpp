#pragma once

// kvlane::tools::bench — workload: arrival times and request mixes.
//
// Problem it solves: a trace recorded on a big GPU cluster says nothing about
// how fast an edge NPU serves it, so its arrival times must be rescaled to
// offer a chosen load to the model under test. The load is measured against
// a deterministic capacity derived from the model's step cost figures (the
// sim's timing model, or a real NPU's figures from `kvlane probe`), never from
// a timed run, so the same flags give the same arrivals on any machine.
//
//   work(requests) = per_token_ms * sum(prompt + output)
//                  + base_ms * max(sum(output) / decode_batch,
//                                  sum(prompt + output) / max_step_tokens)
//
// is the NPU time the requests need at saturation: every token costs its
// per-token time once, and every step pays the fixed cost once, with at best
// `decode_batch` (slots minus spare slots) sequences decoding per step and at
// most `max_step_tokens` tokens in one step. capacity = requests / work.
// offered load = arrival rate * mean work per request, the arrival rate being
// (requests - 1) / (last arrival - first arrival).
//
// Also: marking a seeded random share of requests interactive, and synthetic
// Poisson workloads with lognormal or exponential lengths.
//
// Threading: plain functions over values; the RNG is a value.

#include "tools/bench/trace.hpp"

#include "daemon/config.hpp"

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

namespace kvlane::tools::bench {

/// splitmix64-seeded xoshiro256**: the same numbers with any standard library.
class bench_rng {
public:
  explicit bench_rng(std::uint64_t seed) noexcept;
  std::uint64_t next() noexcept;
  double uniform01() noexcept; ///< in [0, 1)
  double exponential(double mean) noexcept;
  double normal() noexcept; ///< standard normal (Box-Muller)

private:
  std::uint64_t s_[4];
};

/// The step cost figures capacity is computed from.
struct work_model {
  double step_base_ms = 31.0;
  double step_per_token_ms = 1.7;
  std::uint32_t decode_batch = 15;      ///< sequences one step decodes at saturation
  std::uint32_t max_step_tokens = 512;  ///< 0 = no limit
};

/// The figures of `model` under `cfg`: the [model.sim] step costs, and a
/// decode batch of slots - spare_slots.
work_model work_model_for(const daemon::config& cfg, const daemon::model_section& model);

/// NPU milliseconds (simulated) the requests need at saturation.
double work_ms(std::span<const trace_request> requests, const work_model& m);

/// Requests per simulated second the model sustains on this request mix.
double capacity_req_s(std::span<const trace_request> requests, const work_model& m);

/// Offered load of the requests as they arrive: arrival rate * mean work per
/// request, as a fraction of capacity. nullopt with fewer than two requests or
/// when they all arrive at once.
std::optional<double> offered_load(std::span<const trace_request> requests, const work_model& m);

/// Multiplies every arrival time by `factor`.
void scale_arrivals(std::vector<trace_request>& requests, double factor);

/// The factor for scale_arrivals that makes the offered load `load`; nullopt
/// when the offered load is undefined (see offered_load).
std::optional<double> factor_for_load(std::span<const trace_request> requests, const work_model& m,
                                      double load);

/// Marks each request interactive with probability `share` (a seeded draw per
/// request, in order), the others batch. Returns the number marked interactive.
std::size_t mark_interactive(std::vector<trace_request>& requests, double share,
                             std::uint64_t seed);

enum class length_dist : std::uint8_t { lognormal, exponential };
std::string_view to_string(length_dist d) noexcept;

struct synthetic_options {
  std::size_t requests = 200;
  double rate_per_s = 1.0;       ///< Poisson arrivals, simulated seconds
  double prompt_mean = 512;      ///< mean prompt tokens
  double output_mean = 128;      ///< mean output tokens
  length_dist dist = length_dist::lognormal;
  double sigma = 0.5;            ///< lognormal only: sigma of the underlying normal
};

/// Poisson arrivals at `rate_per_s` (the first at 0) with lengths drawn from
/// `dist` with the given means, rounded and at least 1 token.
std::vector<trace_request> synthetic(const synthetic_options& opts, std::uint64_t seed);

} // namespace kvlane::tools::bench
