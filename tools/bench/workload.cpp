#include "tools/bench/workload.hpp"

#include <algorithm>
#include <cmath>
#include <numbers>

namespace kvlane::tools::bench {

namespace {

std::uint64_t splitmix64(std::uint64_t& x) noexcept {
  std::uint64_t z = (x += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

std::uint64_t rotl(std::uint64_t x, int k) noexcept {
  return (x << k) | (x >> (64 - k));
}

} // namespace

bench_rng::bench_rng(std::uint64_t seed) noexcept {
  for (auto& s : s_)
    s = splitmix64(seed);
}

std::uint64_t bench_rng::next() noexcept {
  const std::uint64_t result = rotl(s_[1] * 5, 7) * 9;
  const std::uint64_t t = s_[1] << 17;
  s_[2] ^= s_[0];
  s_[3] ^= s_[1];
  s_[1] ^= s_[2];
  s_[0] ^= s_[3];
  s_[2] ^= t;
  s_[3] = rotl(s_[3], 45);
  return result;
}

double bench_rng::uniform01() noexcept {
  return static_cast<double>(next() >> 11) * 0x1.0p-53;
}

double bench_rng::exponential(double mean) noexcept {
  return -mean * std::log1p(-uniform01());
}

double bench_rng::normal() noexcept {
  const double u1 = 1.0 - uniform01(); // (0, 1]
  const double u2 = uniform01();
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * std::numbers::pi * u2);
}

work_model work_model_for(const daemon::config& cfg, const daemon::model_section& model) {
  work_model m;
  m.step_base_ms = model.backend.sim.step_base_ms;
  m.step_per_token_ms = model.backend.sim.step_per_token_ms;
  const auto slots = model.backend.sim.slots;
  // The preempting modes' batch, whichever modes run: the load must not
  // depend on which modes are compared.
  const auto spare = std::min(cfg.scheduler.spare_slots, slots - 1);
  m.decode_batch = std::max(1u, slots - spare);
  m.max_step_tokens = cfg.scheduler.max_step_tokens;
  return m;
}

double work_ms(std::span<const trace_request> requests, const work_model& m) {
  double tokens = 0, outputs = 0;
  for (auto& r : requests) {
    tokens += static_cast<double>(r.prompt_tokens) + r.output_tokens;
    outputs += r.output_tokens;
  }
  double steps = outputs / std::max(1u, m.decode_batch);
  if (m.max_step_tokens > 0)
    steps = std::max(steps, tokens / m.max_step_tokens);
  return m.step_per_token_ms * tokens + m.step_base_ms * steps;
}

double capacity_req_s(std::span<const trace_request> requests, const work_model& m) {
  const double w = work_ms(requests, m);
  return w > 0 ? static_cast<double>(requests.size()) * 1000.0 / w : 0.0;
}

std::optional<double> offered_load(std::span<const trace_request> requests, const work_model& m) {
  if (requests.size() < 2)
    return std::nullopt;
  const double span = requests.back().arrival_s - requests.front().arrival_s;
  if (!(span > 0))
    return std::nullopt;
  const double rate = static_cast<double>(requests.size() - 1) / span;
  const double mean_work_s = work_ms(requests, m) / 1000.0 / static_cast<double>(requests.size());
  return rate * mean_work_s;
}

void scale_arrivals(std::vector<trace_request>& requests, double factor) {
  for (auto& r : requests)
    r.arrival_s *= factor;
}

std::optional<double> factor_for_load(std::span<const trace_request> requests, const work_model& m,
                                      double load) {
  auto now = offered_load(requests, m);
  if (!now || !(load > 0))
    return std::nullopt;
  return *now / load; // the load is inversely proportional to the time scale factor
}

std::size_t mark_interactive(std::vector<trace_request>& requests, double share,
                             std::uint64_t seed) {
  bench_rng rng{seed ^ 0x1A7E4AC7ull};
  std::size_t n = 0;
  for (auto& r : requests) {
    r.interactive = rng.uniform01() < share;
    n += r.interactive;
  }
  return n;
}

std::string_view to_string(length_dist d) noexcept {
  return d == length_dist::lognormal ? "lognormal" : "exponential";
}

std::vector<trace_request> synthetic(const synthetic_options& opts, std::uint64_t seed) {
  bench_rng rng{seed};
  auto draw = [&](double mean) {
    double x = 0;
    if (opts.dist == length_dist::exponential) {
      x = rng.exponential(mean);
    } else {
      const double mu = std::log(mean) - opts.sigma * opts.sigma / 2; // so that E[x] = mean
      x = std::exp(mu + opts.sigma * rng.normal());
    }
    return static_cast<std::uint32_t>(std::clamp(std::llround(x), 1ll, 1ll << 30));
  };
  std::vector<trace_request> out;
  out.reserve(opts.requests);
  double t = 0;
  for (std::size_t i = 0; i < opts.requests; ++i) {
    if (i > 0)
      t += rng.exponential(1.0 / opts.rate_per_s);
    trace_request r;
    r.arrival_s = t;
    r.prompt_tokens = draw(opts.prompt_mean);
    r.output_tokens = draw(opts.output_mean);
    out.push_back(r);
  }
  return out;
}

} // namespace kvlane::tools::bench
