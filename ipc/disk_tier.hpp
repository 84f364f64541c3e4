#pragma once

// kvlane::ipc::disk_tier — retained KV snapshots as files in a directory, for
// power cycles and for machines without systemd's file-descriptor store.
//
// Problem it solves: the snapshot store lives in memory; a daemon that stops
// without handing its arena to systemd, or a machine that loses power, loses
// every conversation's KV. The tier keeps a copy of retained snapshots on
// disk, bounded by `max_bytes`, listed by a journal (ipc/disk_journal) so a
// start lists them without reading any, and reads one back only when a
// prompt wants it. Nothing read back is trusted before it is checked: the
// header's checksum, the header against the journal's entry, the file's size,
// and (by the caller, the store's verify) the bytes against their seal.
//
// Crash safety: a file is written under a temporary name, fsynced, renamed,
// and the directory fsynced before its journal record is appended; a remove
// is journaled before the unlink. So a kill at any moment leaves at most the
// file being written unlisted (deleted at the next open as an orphan, with
// any temporary file), and never lists a file that is not whole.
//
// Threading: every method is thread-safe. The file I/O of write() and read()
// runs without the lock; the journal and the listing are under it.

#include "common/expected.hpp"
#include "ipc/disk_format.hpp"
#include "ipc/disk_journal.hpp"

#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <vector>

namespace kvlane::ipc {

struct disk_tier_options {
  std::filesystem::path dir;
  std::uint64_t max_bytes = 0; ///< most bytes of files (headers included)
};

/// What open() found.
struct disk_open_report {
  std::size_t entries = 0;     ///< listed and whole (by size)
  std::uint64_t bytes = 0;     ///< their files' bytes
  std::size_t corrupt = 0;     ///< listed, but the file is missing or of the wrong size: dropped
  std::size_t orphans = 0;     ///< files no record lists (a write cut short), deleted
  std::uint64_t torn_bytes = 0; ///< the journal's torn tail, cut
  std::string note;            ///< why the journal's replay stopped early, if it did
};

class disk_tier {
public:
  /// Opens `options.dir` (created, mode 0700, if missing), locks it against a
  /// second daemon, replays the journal and sweeps what it does not list.
  static expected<std::unique_ptr<disk_tier>, std::string> open(disk_tier_options options,
                                                                disk_open_report& report);
  ~disk_tier();
  disk_tier(const disk_tier&) = delete;
  disk_tier& operator=(const disk_tier&) = delete;

  /// The listed entries, oldest use first.
  std::vector<disk_entry> entries() const;

  /// Bytes the file of `e` takes.
  static std::uint64_t file_bytes(const disk_entry& e);

  /// The entries to remove, least recently used first, so that `incoming`
  /// more bytes fit in max_bytes; nothing when incoming alone exceeds it.
  std::optional<std::vector<std::uint64_t>> victims_for(std::uint64_t incoming) const;

  /// A fresh id for the next write.
  std::uint64_t next_id();

  /// Writes `bytes` as entry `e` (e.id from next_id()): temporary file, in
  /// chunks, each after `pace(chunk bytes)` answered true (false: abort),
  /// fsync, rename, directory fsync, journal record. The entry is listed
  /// only once all of that succeeded.
  expected<void, std::string> write(const disk_entry& e, std::span<const std::byte> bytes,
                                    const std::function<bool(std::size_t)>& pace);

  /// Reads entry `expect.id` into `into` (exactly expect.length bytes) after
  /// checking its header against `expect` and the file's size. Any failure
  /// means the file cannot be used.
  expected<void, std::string> read(const disk_entry& expect, std::span<std::byte> into);

  /// Unlists and deletes entry `id` (journal record first).
  void remove(std::uint64_t id);

  /// Marks `id` used now (eviction goes least recently used first).
  void touch(std::uint64_t id);

  std::uint64_t used_bytes() const;
  std::size_t count() const;
  std::uint64_t max_bytes() const noexcept { return options_.max_bytes; }
  const std::filesystem::path& dir() const noexcept { return options_.dir; }

private:
  struct listed {
    disk_entry entry;
    std::uint64_t bytes = 0;
    std::uint64_t last_use = 0;
  };
  disk_tier(disk_tier_options options, int lock_fd, disk_journal journal);
  void compact_locked();

  disk_tier_options options_;
  int lock_fd_ = -1;
  mutable std::mutex mutex_;
  disk_journal journal_;
  std::map<std::uint64_t, listed> listed_;
  std::uint64_t used_ = 0;
  std::uint64_t next_id_ = 1;
  std::uint64_t tick_ = 0;
};

} // namespace kvlane::ipc
