#pragma once

// kvlane::ipc::snapshot_label — what a retained snapshot's KV was computed
// from, and why a snapshot was thrown away instead of used.
//
// Problem it solves: KV bytes are only meaningful under the exact model,
// tokenizer and KV layout that produced them, and only for the exact tokens
// they cover. Within one daemon run that holds by construction; a snapshot
// that outlives the daemon (handed to systemd's file-descriptor store and
// taken back by the next start) may meet another model file, tokenizer, chat
// format or backend version. A label travels with every retained snapshot
// (in daemon memory, and in the persistent index across a restart), so a
// snapshot is used only when its fingerprint equals the loaded model's and
// its tokens are a prefix of the prompt, checked token for token.
//
// Plain values; no threading concerns.

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace kvlane::ipc {

/// The identity of the computation KV belongs to. Two snapshots are
/// interchangeable only under equal fingerprints (every field).
struct kv_fingerprint {
  std::uint64_t model_file = 0; ///< content hash of the weights file (the sim: its config identity)
  std::uint64_t tokenizer = 0;  ///< hash of every token's bytes and the special tokens
  std::uint64_t kv_layout = 0;  ///< hash of bytes per token and slot, header bytes, dtype, layers, context
  std::string backend;          ///< backend kind and its version, e.g. "llamacpp 6000"
  std::string chat_format;      ///< the chat format prompts are rendered with

  friend bool operator==(const kv_fingerprint&, const kv_fingerprint&) = default;
};

/// Why a snapshot (or a whole index) was discarded instead of used.
enum class discard_reason : std::uint8_t {
  model_changed,       ///< the weights file's content hash differs
  tokenizer_changed,   ///< the tokenizer's hash differs
  kv_layout_changed,   ///< bytes per token/slot, dtype, layers or context differ
  backend_changed,     ///< another backend or backend version
  chat_format_changed, ///< another chat format
  tokens_mismatch,     ///< the recorded tokens are not a prefix of the prompt
  unknown_model,       ///< no loaded model of the recorded name
  checksum,            ///< the bytes no longer match their checksum
  index_corrupt,       ///< the index failed validation (one count per index)
  index_unclean,       ///< the daemon that wrote the index did not stop cleanly (one per index)
  arena_changed,       ///< the inherited arena is not the one the index describes, or was resized
  disk_corrupt,        ///< a disk tier file is torn, truncated, damaged or missing
};

inline constexpr std::size_t discard_reason_count = 12;

/// Stable lower-case name, e.g. "model_changed" (the metric label).
std::string_view to_string(discard_reason r) noexcept;

/// Per reason, indexed by the enum's value.
using discard_counts = std::array<std::uint64_t, discard_reason_count>;

/// Why `recorded` is not usable under `loaded`: the first field that
/// differs, in the order model file, tokenizer, KV layout, backend, chat
/// format. Nothing when they are equal.
std::optional<discard_reason> fingerprint_mismatch(const kv_fingerprint& recorded,
                                                   const kv_fingerprint& loaded) noexcept;

/// Everything a retained snapshot carries besides its bytes.
struct snapshot_label {
  std::string model;                 ///< the configured model name
  kv_fingerprint fingerprint;        ///< of the model that dumped it
  std::uint64_t owner = 0;           ///< who may reuse it (the reuse scope's owner)
  std::uint64_t user = 0;            ///< who left it
  std::string session;               ///< the client session it was a turn of; empty: none
  std::vector<std::uint32_t> tokens; ///< exactly the KV's positions, in order

  friend bool operator==(const snapshot_label&, const snapshot_label&) = default;
};

} // namespace kvlane::ipc
