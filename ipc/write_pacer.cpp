#include "ipc/write_pacer.hpp"

#include <algorithm>

namespace kvlane::ipc {

namespace {

std::chrono::nanoseconds time_for(std::uint64_t bytes, std::uint64_t rate) noexcept {
  // bytes * 1e9 / rate without overflow for any byte count below 2^64 / 1e9 * rate.
  const auto whole = bytes / rate;
  const auto rest = bytes % rate;
  return std::chrono::nanoseconds(static_cast<std::int64_t>(
    whole * 1'000'000'000ull + rest * 1'000'000'000ull / rate));
}

} // namespace

write_pacer::write_pacer(std::uint64_t bytes_per_second, std::uint64_t burst_bytes) noexcept
  : rate_(bytes_per_second),
    burst_(bytes_per_second == 0 ? duration::zero() : time_for(burst_bytes, bytes_per_second)) {}

write_pacer::duration write_pacer::charge(std::uint64_t bytes, duration now) noexcept {
  if (rate_ == 0)
    return duration::zero();
  // GCRA: the bucket is empty again at tat_; a charge moves it by the bytes'
  // time at the rate, and must wait while that is more than a burst ahead.
  const duration start = std::max(tat_, now);
  tat_ = start + time_for(bytes, rate_);
  return std::max(duration::zero(), tat_ - burst_ - now);
}

} // namespace kvlane::ipc
