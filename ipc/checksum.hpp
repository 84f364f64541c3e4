#pragma once

// kvlane::ipc::checksum64 — integrity check for parked KV snapshots.
//
// Problem it solves: a snapshot lives in shared memory for a long time between
// dump and load; a stray write (a bug, a client that got the memfd) must be
// caught before the bytes go back into an NPU slot. Not cryptographic: it
// detects accidents, not attackers.
//
// Properties the snapshot store relies on:
//  - any change confined to one aligned 8-byte word (so any single flipped
//    byte or bit) always changes the result: every mixing step is a bijection;
//  - the length is mixed in, so trailing zeros are not invisible;
//  - fast: four independent lanes keep the multiplier busy, so hashing runs
//    near memory bandwidth.
// The value depends on host byte order; it is not a persistent format.
//
// Thread contract: a pure function; callers make sure nobody writes `data`
// while it is hashed.

#include <cstddef>
#include <cstdint>
#include <span>

namespace kvlane::ipc {

/// 64-bit checksum of `data`, keyed by `seed` (the store seeds it with the
/// snapshot's metadata so identical bytes under another identity differ).
std::uint64_t checksum64(std::span<const std::byte> data, std::uint64_t seed = 0) noexcept;

} // namespace kvlane::ipc
