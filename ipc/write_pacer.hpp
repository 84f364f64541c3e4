#pragma once

// kvlane::ipc::write_pacer — bounds the bandwidth of the disk tier's writes.
//
// Problem it solves: writing retained KV back to disk competes with the
// device's transfers and with everything else on the machine for memory
// bandwidth and the disk; an unbounded write-back of a few GiB would stall
// both. The pacer is a token bucket kept as a theoretical arrival time: up to
// `burst_bytes` go at once, after that bytes go at `bytes_per_second`. Over
// any interval of length t from the start, at most bytes_per_second * t +
// burst_bytes are let through.
//
// Clock-free: the caller passes the time (any monotonic epoch) and sleeps for
// the delay it gets back. Threading: one user (the disk lane).

#include <chrono>
#include <cstdint>

namespace kvlane::ipc {

class write_pacer {
public:
  using duration = std::chrono::nanoseconds;

  /// 0 bytes per second: unbounded (every charge answers 0).
  write_pacer(std::uint64_t bytes_per_second, std::uint64_t burst_bytes) noexcept;

  /// Charges `bytes` written at `now`: how long to wait before writing them.
  duration charge(std::uint64_t bytes, duration now) noexcept;

  std::uint64_t bytes_per_second() const noexcept { return rate_; }

private:
  std::uint64_t rate_;
  duration burst_;         // burst_bytes at the rate
  duration tat_{duration::min()}; // when the bucket would be full again ("theoretical arrival")
};

} // namespace kvlane::ipc
