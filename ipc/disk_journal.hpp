#pragma once

// kvlane::ipc::disk_journal — the append-only index of the disk tier.
//
// Problem it solves: listing the tier's snapshots at start must not read
// every file (GiBs), and must survive a crash at any moment. Each change is
// one record appended and made durable (fdatasync) before it counts: an add
// after its file is durable under its final name, a remove before its file
// is unlinked. A crash mid-append leaves a torn tail, which replay drops and
// open() truncates. The journal grows with every change, so it is rewritten
// with the live entries alone (compact: a new file, fsync, rename) once it
// holds more than twice their bytes. Record format: ipc/disk_format.hpp.
//
// Threading: one user at a time (disk_tier serialises it).

#include "common/expected.hpp"
#include "ipc/disk_format.hpp"

#include <filesystem>
#include <map>
#include <string>

namespace kvlane::ipc {

class disk_journal {
public:
  /// Opens (or creates) `path`, replays it and truncates a torn tail. A file
  /// without a valid header is started over (its entries are lost: `replay`
  /// says so).
  static expected<disk_journal, std::string> open(const std::filesystem::path& path,
                                                  journal_replay& replay);

  disk_journal(disk_journal&&) noexcept;
  disk_journal& operator=(disk_journal&&) noexcept;
  disk_journal(const disk_journal&) = delete;
  disk_journal& operator=(const disk_journal&) = delete;
  ~disk_journal();

  expected<void, std::string> add(const disk_entry& e);
  expected<void, std::string> remove(std::uint64_t id);

  /// Rewrites the journal with `live` alone when it holds more than twice
  /// their bytes (and at least 64 KiB). True when it did.
  expected<bool, std::string> compact_if_due(const std::map<std::uint64_t, disk_entry>& live);
  /// Whether compact_if_due would rewrite it.
  bool compaction_due() const noexcept;
  /// Rewrites it unconditionally.
  expected<void, std::string> compact(const std::map<std::uint64_t, disk_entry>& live);

  std::uint64_t bytes() const noexcept { return bytes_; }
  std::uint64_t live_bytes() const noexcept { return live_bytes_; }

private:
  disk_journal(std::filesystem::path path, int fd, std::uint64_t bytes) noexcept
    : path_(std::move(path)), fd_(fd), bytes_(bytes) {}
  expected<void, std::string> append(const std::vector<std::byte>& record);

  std::filesystem::path path_;
  int fd_ = -1;
  std::uint64_t bytes_ = 0;      // file size
  std::uint64_t live_bytes_ = 0; // what the live entries' add records take (estimated on open)
  std::map<std::uint64_t, std::uint64_t> record_bytes_; // add record size, by id
};

/// Writes all of `bytes` at `offset` (pwrite, retried on EINTR and short writes).
expected<void, std::string> write_fully(int fd, std::span<const std::byte> bytes,
                                        std::uint64_t offset, std::string_view what);
/// fsyncs directory `dir`, so a rename or unlink in it is durable.
expected<void, std::string> sync_directory(const std::filesystem::path& dir);

} // namespace kvlane::ipc
