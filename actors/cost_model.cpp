#include "actors/cost_model.hpp"

#include <algorithm>
#include <cmath>

namespace kvlane::actors {

namespace {

void blend(std::optional<double>& avg, double sample, double alpha) {
  avg = avg ? (1 - alpha) * *avg + alpha * sample : sample;
}

} // namespace

cost_model::cost_model(double alpha) : alpha_(alpha) {}

void cost_model::observe_step(std::uint32_t tokens, double ms) {
  if (fixed_)
    return;
  const double k = 1 - alpha_;
  const double x = tokens;
  s0_ = k * s0_ + alpha_;
  sx_ = k * sx_ + alpha_ * x;
  sy_ = k * sy_ + alpha_ * ms;
  sxx_ = k * sxx_ + alpha_ * x * x;
  sxy_ = k * sxy_ + alpha_ * x * ms;
  const double var = s0_ * sxx_ - sx_ * sx_;
  // Without spread in token counts the slope is not identifiable: keep the last one.
  if (var > 1e-9 * s0_ * s0_ * std::max(1.0, sxx_ / s0_)) {
    const double slope = (s0_ * sxy_ - sx_ * sy_) / var;
    if (slope > 0)
      per_token_ms_ = slope;
  }
}

void cost_model::observe_dump(std::uint64_t bytes, double ms) {
  if (bytes > 0 && !fixed_)
    blend(dump_ms_per_byte_, ms / double(bytes), alpha_);
}

void cost_model::observe_load(std::uint64_t bytes, double ms) {
  if (bytes > 0 && !fixed_)
    blend(load_ms_per_byte_, ms / double(bytes), alpha_);
}

std::optional<double> cost_model::step_per_token_ms() const {
  if (fixed_)
    return fixed_->step_per_token_ms;
  return per_token_ms_;
}

std::optional<double> cost_model::step_base_ms() const {
  if (fixed_)
    return fixed_->step_base_ms;
  auto slope = step_per_token_ms();
  if (!slope)
    return std::nullopt;
  return std::max(0.0, (sy_ - *slope * sx_) / s0_);
}

std::optional<double> cost_model::dump_ms(std::uint64_t bytes) const {
  if (fixed_)
    return fixed_->dump_ms_per_mib * double(bytes) / double(1u << 20);
  if (!dump_ms_per_byte_)
    return std::nullopt;
  return *dump_ms_per_byte_ * double(bytes);
}

std::optional<double> cost_model::load_ms(std::uint64_t bytes) const {
  if (fixed_)
    return fixed_->load_ms_per_mib * double(bytes) / double(1u << 20);
  if (!load_ms_per_byte_)
    return std::nullopt;
  return *load_ms_per_byte_ * double(bytes);
}

std::optional<double> cost_model::recompute_ms(std::uint32_t tokens) const {
  auto per_token = step_per_token_ms();
  if (!per_token)
    return std::nullopt;
  return *per_token * tokens;
}

std::optional<double> cost_model::swap_ms(std::uint64_t bytes, bool dump_exposed) const {
  auto load = load_ms(bytes);
  if (!load)
    return std::nullopt;
  if (!dump_exposed)
    return load;
  auto dump = dump_ms(bytes);
  if (!dump)
    return std::nullopt;
  return *load + *dump;
}

bool cost_model::prefer_recompute(std::uint32_t tokens, std::uint64_t bytes,
                                  bool dump_exposed) const {
  auto recompute = recompute_ms(tokens);
  auto swap = swap_ms(bytes, dump_exposed);
  if (!recompute || !swap)
    return false;
  return *recompute <= *swap / 0.9;
}

} // namespace kvlane::actors
