#pragma once

// kvlane::ipc::checksum64 — integrity check for parked KV snapshots.
//
// Problem it solves: a snapshot lives in shared memory for a long time between
// dump and load; a stray write (a bug, a client that got the memfd) must be
// caught before the bytes go back into an NPU slot. Not cryptographic: it
// detects accidents, not attackers.
//
// It is XXH3-64 (libxxhash), seeded: vectorised, it hashes out-of-cache data at
// memory bandwidth, so sealing a snapshot costs about half a memcpy of it (one
// read pass, no write). Any damage is missed with probability about 2^-64.
// The length is part of the hash, so trailing zeros are not invisible.
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
