#pragma once

// kvlane::ipc::store_detail — what the snapshot store's translation units
// (snapshot_store*.cpp) share and nothing else uses: the shape of its errors,
// its host-time counters and the seed of a snapshot's checksum. Not part of
// the store's interface.

#include "ipc/checksum.hpp"
#include "ipc/snapshot_store.hpp"

#include <array>
#include <chrono>
#include <span>
#include <string>
#include <utility>

namespace kvlane::ipc::store_detail {

using clock = std::chrono::steady_clock;

inline unexpected<store_error> fail(store_errc code, std::string message) {
  return unexpected(store_error{code, std::move(message)});
}

/// A handle whose snapshot was freed or evicted (or never existed).
inline unexpected<store_error> stale(snapshot_handle h) {
  return fail(store_errc::stale, "snapshot " + to_string(h) + " is stale (freed or evicted)");
}

/// Counts one call of a host phase that started at `start`.
inline void add_time(phase_time& phase, clock::time_point start) noexcept {
  ++phase.count;
  phase.ns += static_cast<std::uint64_t>(
    std::chrono::duration_cast<std::chrono::nanoseconds>(clock::now() - start).count());
}

/// The checksum is keyed by the snapshot's identity, so bytes that are intact
/// but filed under another sequence, generation or model do not verify.
inline std::uint64_t meta_seed(const snapshot_meta& m) noexcept {
  const std::array<std::uint64_t, 4> fields{
    m.model_identity, (std::uint64_t{m.model_index} << 32) | m.cache_len, m.generation,
    m.sequence_id};
  return checksum64(std::as_bytes(std::span(fields)));
}

} // namespace kvlane::ipc::store_detail
