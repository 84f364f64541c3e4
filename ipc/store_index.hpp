#pragma once

// kvlane::ipc::store_index — the persistent index of the snapshot store: which
// extents of the arena hold which retained snapshots, with their checksums
// and labels, in a memfd of its own.
//
// Problem it solves: the arena memfd outlives a daemon restart when it is
// parked in systemd's file-descriptor store, but the store's metadata lives
// in daemon memory. The index carries it across: the daemon writes it when it
// stops cleanly and the next start reads it back, re-attaching the snapshots
// without copying a byte of KV. It is never trusted blindly:
//  - a versioned header with its own checksum, and a checksum over the
//    records; any mismatch, a truncated file, an extent outside the arena,
//    unaligned or overlapping extents: the whole index is corrupt and dropped;
//  - a state word: the daemon marks the index `open` as soon as it takes it
//    (before the arena changes) and `closed` only as the last write of a
//    clean stop, so the index of a daemon that crashed reads `open` and is
//    dropped (the arena's bytes no longer match it);
//  - the arena's size and inode number, so an index never describes another
//    arena than the one it came with.
// Each snapshot keeps its own checksum, verified before every load as usual.
//
// Format (native byte order: the index never leaves the machine; version 1):
//   header (72 bytes): magic "KVLSTIDX", version u32, state u32, arena_bytes,
//     arena_inode, granularity, records, body_bytes, body_checksum u64,
//     header_checksum u64 (XXH3 of the 64 bytes before it)
//   body: per record: offset, length, size, checksum, seed u64; cache_len u32;
//     owner, user, model_file, tokenizer, kv_layout u64; then the strings
//     model, backend, chat_format, session (u32 length + bytes) and the
//     tokens (u32 count + u32 each).
//
// Threading: pure functions, and a file object used by one thread.

#include "common/expected.hpp"
#include "ipc/memfd_arena.hpp"
#include "ipc/snapshot_label.hpp"

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace kvlane::ipc {

inline constexpr std::uint32_t store_index_version = 1;

/// One retained snapshot as the index records it.
struct index_record {
  std::uint64_t offset = 0;   ///< in the arena, a multiple of the granularity
  std::uint64_t length = 0;   ///< bytes written
  std::uint64_t size = 0;     ///< bytes charged: length rounded up to the granularity
  std::uint64_t checksum = 0; ///< of the bytes, as sealed
  std::uint64_t seed = 0;     ///< the checksum's seed
  std::uint32_t cache_len = 0;
  snapshot_label label;
};

struct index_contents {
  std::uint64_t arena_bytes = 0; ///< the arena's usable size (a multiple of the granularity)
  std::uint64_t arena_inode = 0; ///< st_ino of the arena's memfd
  std::uint64_t granularity = 0;
  std::vector<index_record> records;
};

enum class index_errc : std::uint8_t {
  empty,   ///< no index was ever written (a fresh file)
  unclean, ///< the writer did not stop cleanly (state open)
  corrupt, ///< anything that fails validation
};

struct index_error {
  index_errc code = index_errc::corrupt;
  std::string message;
};

/// The closed index of `contents` (state closed, both checksums set).
std::vector<std::byte> encode_index(const index_contents& contents);

/// Reads an index back. Every field is validated: sizes, checksums, state,
/// version, each record's extent (aligned, inside the arena, no overlap,
/// length within size) and every length field against the bytes left.
expected<index_contents, index_error> decode_index(std::span<const std::byte> bytes);

/// The index's memfd. Written with pwrite (no mapping), so its size follows
/// the records.
class index_file {
public:
  /// A new, empty index file.
  static expected<index_file, store_error> create();
  /// Takes ownership of an inherited fd; it must be a regular file or memfd.
  static expected<index_file, store_error> adopt(int fd);

  index_file(index_file&&) noexcept;
  index_file& operator=(index_file&&) noexcept;
  index_file(const index_file&) = delete;
  index_file& operator=(const index_file&) = delete;
  ~index_file();

  int fd() const noexcept { return fd_; }

  /// The whole file.
  expected<std::vector<std::byte>, store_error> read() const;
  /// Marks the index open (its contents no longer describe the arena): the
  /// state word only, in place. A file too short to hold a header is left
  /// empty (it reads as empty).
  expected<void, store_error> mark_open();
  /// Replaces the contents with a closed index: the body and the header
  /// with state open first, then the state word closed as the last write.
  expected<void, store_error> write(const index_contents& contents);

private:
  explicit index_file(int fd) noexcept : fd_(fd) {}
  int fd_ = -1;
};

} // namespace kvlane::ipc
