#include "actors/door_forecast.hpp"

#include "actors/sequence_table.hpp"

#include <chrono>
#include <utility>

namespace kvlane::actors {

namespace {

std::size_t index_of(priority_class c) noexcept { return static_cast<std::size_t>(c); }

} // namespace

std::optional<double> predicted_start_ms(const door_figures& f, priority_class cls) noexcept {
  const auto ahead = f.ahead[index_of(cls)];
  const auto open = f.open[index_of(cls)];
  if (open > ahead)
    return 0.0;
  if (!(f.grants_per_s > 0))
    return std::nullopt;
  // It takes the (ahead - open + 1)-th slot handed out from now.
  return static_cast<double>(ahead - open + 1) / f.grants_per_s * 1000.0;
}

std::optional<double> door_refusal(const door_figures& f, priority_class cls) noexcept {
  const double limit = f.refuse_after_ms[index_of(cls)];
  if (!(limit > 0))
    return std::nullopt;
  const auto start = predicted_start_ms(f, cls);
  const auto& recent = f.recent_wait_ms[index_of(cls)];
  if (!start || *start <= limit || !recent || *recent <= limit)
    return std::nullopt;
  return start;
}

std::array<std::uint32_t, 2> door_ahead(const sequence_table& table, bool by_class) {
  std::array<std::uint32_t, 2> waiting{};
  for (std::size_t c = 0; c < 2; ++c)
    waiting[c] = table.count(kv_state::queued)[c] + table.count(kv_state::parked)[c];
  if (!by_class) {
    const auto all = waiting[0] + waiting[1];
    return {all, all};
  }
  const auto& top = table.top_waiting();
  return {top[0], waiting[0] + top[1]};
}

std::array<std::uint32_t, 2> door_open(const sequence_table& table, std::uint32_t free_slots,
                                       bool preemptive) {
  const auto batch_held = table.count(kv_state::resident)[index_of(priority_class::batch)];
  return {free_slots + (preemptive ? batch_held : 0), free_slots};
}

std::array<double, 2> door_limits(const slo_targets& slo, double refuse_over) noexcept {
  if (!(refuse_over > 0))
    return {0.0, 0.0};
  return {refuse_over * slo.interactive.ttft_ms, refuse_over * slo.batch.ttft_ms};
}

door_figures door_figures_of(const sequence_table& table, const grant_meter& meter,
                             std::chrono::steady_clock::time_point now, const door_setup& setup) {
  door_figures f;
  f.open = door_open(table, setup.free_slots, setup.preemptive);
  f.ahead = door_ahead(table, setup.by_class);
  f.grants_per_s = meter.per_second(now);
  f.refuse_after_ms = setup.limits;
  for (std::size_t c = 0; c < 2; ++c)
    f.recent_wait_ms[c] = table.first_waits(static_cast<priority_class>(c)).median();
  return f;
}

void wait_window::observe(double wait_ms) noexcept {
  waits_[next_] = wait_ms;
  next_ = (next_ + 1) % size;
  if (count_ < size)
    ++count_;
}

std::optional<double> wait_window::median() const {
  if (count_ < min_waits)
    return std::nullopt;
  std::array<double, size> sorted = waits_;
  for (std::size_t i = 1; i < count_; ++i) // eight at most: an insertion sort
    for (std::size_t j = i; j > 0 && sorted[j - 1] > sorted[j]; --j)
      std::swap(sorted[j - 1], sorted[j]);
  return count_ % 2 == 1 ? sorted[count_ / 2]
                         : (sorted[count_ / 2 - 1] + sorted[count_ / 2]) / 2;
}

void grant_meter::observe(time_point now, std::uint64_t total_grants) {
  if (count_ > 0) {
    const auto& last = samples_[(next_ + window - 1) % window];
    if (total_grants <= last.total)
      return; // nothing granted since the last sample
  }
  samples_[next_] = {now, total_grants};
  next_ = (next_ + 1) % window;
  if (count_ < window)
    ++count_;
}

double grant_meter::per_second(time_point now) const {
  if (count_ < 2)
    return 0;
  const auto& oldest = samples_[count_ < window ? 0 : next_];
  const auto& newest = samples_[(next_ + window - 1) % window];
  const auto grants = newest.total - oldest.total;
  const double seconds = std::chrono::duration<double>(now - oldest.at).count();
  if (grants < min_grants || !(seconds > 0))
    return 0;
  return static_cast<double>(grants) / seconds;
}

} // namespace kvlane::actors
