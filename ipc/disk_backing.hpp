#pragma once

// kvlane::ipc::disk_backing — the disk tier as the snapshot store sees it.
//
// Problem it solves: the store decides when a retained snapshot needs a disk
// copy (it was sealed), when a copy must go (its snapshot was freed), and
// when one must come back (a load of a snapshot that lives on disk only); the
// disk lane (actors/disk_lane) does the I/O. The store calls these with its
// lock held, so the first two must only queue work and return.
//
// Threading: thread-safe; sealed() and forget() never block on I/O.

#include "common/expected.hpp"
#include "ipc/disk_format.hpp"
#include "ipc/memfd_arena.hpp"

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

namespace kvlane::ipc {

struct snapshot_handle;

class disk_backing {
public:
  virtual ~disk_backing() = default;
  /// A retained, labelled snapshot was sealed: write a copy (queued).
  virtual void sealed(snapshot_handle h) = 0;
  /// The snapshot whose copy is entry `disk_id` is gone: delete it (queued).
  virtual void forget(std::uint64_t disk_id) = 0;
  /// Reads entry `expect.id` into `into`, on the caller's thread (a transfer
  /// lane, for a load). An error means the file is unusable.
  virtual expected<void, std::string> fetch(const disk_entry& expect,
                                            std::span<std::byte> into) = 0;
};

} // namespace kvlane::ipc
