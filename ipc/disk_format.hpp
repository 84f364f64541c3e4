#pragma once

// kvlane::ipc::disk_format — the bytes of the snapshot store's disk tier: a
// snapshot file's header and the records of the tier's journal.
//
// Problem it solves: retained KV written to disk must come back only when it
// is exactly what was written, under the model that computed it. A file that
// was torn by a crash, truncated, or had a byte flipped must never load, and
// the journal that lists the files must survive a crash in the middle of an
// append. Both are validated field by field before anything in them is used.
//
// A snapshot file (`<id as 16 hex digits>.kv`):
//   header: magic "KVLDISK1", version u32, reserved u32, header_bytes u64
//     (the whole header, this checksum included), then the entry (below),
//     then header_checksum u64: XXH3 of every header byte before it;
//   then `length` bytes of KV, whose checksum64 under `seed` is `checksum`
//     (the snapshot store's own seal: the header checksum covers it, so one
//     chain of checksums covers header and bytes).
// An entry: id, length, checksum, seed u64; cache_len u32; owner, user,
//   model_file, tokenizer, kv_layout u64; the strings model, backend,
//   chat_format, session (u32 length + bytes); the tokens (u32 count + u32
//   each).
// The journal (`journal`): magic "KVLJRNL1", version u32, reserved u32; then
//   records: payload_bytes u32, kind u32 (1 add: an entry; 2 remove: an id
//   u64), the payload, and XXH3 of kind and payload (u64). Replay stops at the
//   first record that is short or fails its checksum: a torn tail.
//
// Native byte order: the files never leave the machine that wrote them.
//
// Threading: pure functions.

#include "common/expected.hpp"
#include "ipc/snapshot_label.hpp"

#include <cstddef>
#include <cstdint>
#include <map>
#include <span>
#include <string>
#include <vector>

namespace kvlane::ipc {

inline constexpr std::uint32_t disk_format_version = 1;

/// One snapshot of the disk tier: what its file header and its journal
/// record say. `checksum` and `seed` are the snapshot store's seal.
struct disk_entry {
  std::uint64_t id = 0;
  std::uint64_t length = 0; ///< KV bytes after the header
  std::uint64_t checksum = 0;
  std::uint64_t seed = 0;
  std::uint32_t cache_len = 0;
  snapshot_label label;

  friend bool operator==(const disk_entry&, const disk_entry&) = default;
};

/// The whole header of `e`'s file.
std::vector<std::byte> encode_disk_header(const disk_entry& e);

/// Header bytes to read first: enough to learn the whole header's size.
inline constexpr std::size_t disk_header_prefix_bytes = 24;

/// The header's total size from its first disk_header_prefix_bytes, after
/// checking magic and version and bounding it (at most 64 MiB).
expected<std::uint64_t, std::string> disk_header_size(std::span<const std::byte> prefix);

/// Decodes a whole header (exactly disk_header_size bytes): its checksum,
/// every length field against the bytes left, tokens equal to cache_len.
expected<disk_entry, std::string> decode_disk_header(std::span<const std::byte> header);

/// Why a file's entry is not the one the journal expects: the first field
/// that differs, or nothing when equal.
std::optional<std::string> disk_entry_mismatch(const disk_entry& recorded,
                                               const disk_entry& expected);

// -- the journal ----------------------------------------------------------------

enum class journal_kind : std::uint32_t { add = 1, remove = 2 };

/// The journal file's header.
std::vector<std::byte> encode_journal_header();
inline constexpr std::size_t journal_header_bytes = 16;

std::vector<std::byte> encode_journal_add(const disk_entry& e);
std::vector<std::byte> encode_journal_remove(std::uint64_t id);

struct journal_replay {
  std::map<std::uint64_t, disk_entry> entries; ///< live entries, by id
  std::uint64_t valid_bytes = 0;   ///< header plus every whole, valid record
  std::uint64_t records = 0;       ///< valid records replayed
  std::uint64_t torn_bytes = 0;    ///< bytes after the last valid record (dropped)
  bool header_bad = false;         ///< no valid header: nothing is trusted
  std::string note;                ///< why replay stopped early, for the log
};

/// Replays a journal: adds and removes in order, up to the first record that
/// is short or fails its checksum (everything from there is a torn tail).
journal_replay replay_journal(std::span<const std::byte> bytes);

/// The file name of entry `id` ("00000000000000a3.kv").
std::string disk_file_name(std::uint64_t id);

} // namespace kvlane::ipc
