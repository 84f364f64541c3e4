#pragma once

// kvlane::ipc::memfd_arena — the elastic backing memory of the snapshot store.
//
// Problem it solves: parked KV snapshots need a large host pool (GiBs) that
// costs RAM only for what is live. The arena is one memfd, sized to the
// configured maximum with ftruncate and mapped once MAP_SHARED|MAP_NORESERVE:
// the address range is reserved, pages are committed by the kernel when first
// written (or commit()ted up front), and release() punches them out again (fallocate PUNCH_HOLE) so RSS
// follows live data. committed_bytes() measures what the kernel really holds.
// The fd can be passed to systemd's file-descriptor store and adopted by
// the next daemon (adopt()), so the KV outlives a restart.
//
// Ownership: an arena owns its fd and its mapping; it is movable, not
// copyable. Spans handed out point into the mapping and die with the arena.
//
// Thread contract: all methods are const-safe to call concurrently; release()
// of a range while another thread touches the same range is the caller's bug
// (the snapshot store guarantees nobody does).

#include "common/expected.hpp"

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>

namespace kvlane::ipc {

/// Errors of the snapshot store module (memfd_arena and snapshot_store).
enum class store_errc : std::uint8_t {
  full = 1,         ///< no room, and nothing may be evicted to make some
  too_large,        ///< the request can never fit (arena, limit, floors or cap)
  stale,            ///< the handle names a snapshot that was freed or evicted
  corrupt,          ///< checksum or generation mismatch
  invalid_argument, ///< bad size, alignment, model, or call in the wrong state
  system,           ///< a system call failed (the message carries errno text)
};

/// Stable lower-case name, e.g. "too_large".
std::string_view to_string(store_errc code) noexcept;

struct store_error {
  store_errc code = store_errc::system;
  std::string message;
};

class memfd_arena {
public:
  /// Creates an arena of `max_bytes` (rounded up to the OS page size). `name`
  /// shows up in /proc/<pid>/fd and /proc/<pid>/maps (memfd:<name>).
  static expected<memfd_arena, store_error> create(std::string_view name, std::uint64_t max_bytes);

  /// Maps an existing memfd (one an earlier daemon created and parked in
  /// systemd's file-descriptor store) in place: nothing is copied, its pages
  /// and their contents stay as they are. Takes ownership of `fd` in every
  /// case. Fails on a file that is not a page-sized regular file or memfd.
  static expected<memfd_arena, store_error> adopt(int fd);

  memfd_arena(memfd_arena&&) noexcept = default;
  memfd_arena& operator=(memfd_arena&&) noexcept = default;
  memfd_arena(const memfd_arena&) = delete;
  memfd_arena& operator=(const memfd_arena&) = delete;
  ~memfd_arena() = default;

  /// The memfd (MFD_CLOEXEC). Owned by the arena: dup it to keep it longer.
  int fd() const noexcept { return fd_.get(); }

  /// Reserved size in bytes (a multiple of kvlane::page_size()).
  std::uint64_t size() const noexcept { return map_.size(); }

  /// Base of the mapping.
  std::byte* data() const noexcept { return map_.data(); }

  /// The bytes [offset, offset + length); the range must lie inside the arena.
  std::span<std::byte> bytes(std::uint64_t offset, std::uint64_t length) const noexcept;

  /// Returns the pages of [offset, offset + length) to the OS; they read as
  /// zero afterwards. offset and length must be multiples of kvlane::page_size().
  expected<void, store_error> release(std::uint64_t offset, std::uint64_t length) const;

  /// Commits the pages of [offset, offset + length) and maps them writable in
  /// this process (madvise MADV_POPULATE_WRITE), so later writes take no page
  /// fault. Contents are kept. offset and length must be multiples of
  /// kvlane::page_size().
  expected<void, store_error> commit(std::uint64_t offset, std::uint64_t length) const;

  /// Bytes the kernel really holds for the memfd (fstat st_blocks * 512).
  expected<std::uint64_t, store_error> committed_bytes() const;

  /// The memfd's inode number: names this arena across fd passing (the
  /// persistent index records it).
  expected<std::uint64_t, store_error> inode() const;

private:
  class owned_fd {
  public:
    explicit owned_fd(int fd = -1) noexcept : fd_(fd) {}
    owned_fd(owned_fd&& other) noexcept;
    owned_fd& operator=(owned_fd&& other) noexcept;
    owned_fd(const owned_fd&) = delete;
    owned_fd& operator=(const owned_fd&) = delete;
    ~owned_fd();
    int get() const noexcept { return fd_; }

  private:
    int fd_;
  };

  class mapping {
  public:
    mapping() noexcept = default;
    mapping(std::byte* data, std::uint64_t size) noexcept : data_(data), size_(size) {}
    mapping(mapping&& other) noexcept;
    mapping& operator=(mapping&& other) noexcept;
    mapping(const mapping&) = delete;
    mapping& operator=(const mapping&) = delete;
    ~mapping();
    std::byte* data() const noexcept { return data_; }
    std::uint64_t size() const noexcept { return size_; }

  private:
    std::byte* data_ = nullptr;
    std::uint64_t size_ = 0;
  };

  memfd_arena(owned_fd fd, mapping map) noexcept : fd_(std::move(fd)), map_(std::move(map)) {}

  owned_fd fd_; // declared first: destroyed after the mapping
  mapping map_;
};

} // namespace kvlane::ipc
