#pragma once

// kvlane::actors::model_fingerprint — the identity of what a model's KV is
// computed from (ipc::kv_fingerprint): its weights, tokenizer, chat format,
// backend and KV layout.
//
// Problem it solves: a retained snapshot may outlive the daemon run that made
// it (the store survives a restart through systemd's fd store). It is usable
// only under the very model that made it, and "the same name in the config"
// says nothing about the file behind it. The fingerprint pins it down:
//  - model_file: a content hash (XXH3) of the weights file(s) — the GGUF for
//    llamacpp; the .mxq and the embedding table for qbruntime; for the sim,
//    which has no file, its config identity. Hashing GiBs takes seconds, so
//    the hash is computed once and cached on disk, keyed by the file's path,
//    size, mtime (ns), inode and device: a changed or replaced file has
//    another key and is hashed again.
//  - tokenizer: a hash of every token's bytes, the BOS and stop tokens, the
//    ids of the chat formats' special tokens and the model's own template.
//  - kv_layout: bytes per token and per full slot, a snapshot's header bytes,
//    the snapshot extent, context length and KV dtype.
//  - backend: its kind and version; chat_format: the configured format (the
//    template's hash for auto/template).
//
// Threading: plain functions; the cache tolerates concurrent daemons (each
// entry is written to a temporary file and renamed).

#include "actors/engine_config.hpp"
#include "backends/backend.hpp"
#include "common/expected.hpp"
#include "ipc/snapshot_label.hpp"

#include <cstdint>
#include <filesystem>
#include <string>

namespace kvlane::actors {

/// Where content hashes are cached: $CACHE_DIRECTORY (systemd's
/// CacheDirectory=), else $XDG_CACHE_HOME/kvlane, else $HOME/.cache/kvlane;
/// empty when none is set (hashes are then computed at every start).
std::filesystem::path default_hash_cache_dir();

/// The content hash of a file, from the cache in `cache_dir` when an entry
/// for its current path, size, mtime, inode and device exists, else computed
/// (one read pass) and stored there. An empty `cache_dir` turns caching off;
/// a cache that cannot be written only costs the next start a new pass.
/// `computed` (optional) tells whether this call hashed the file.
expected<std::uint64_t, std::string> file_content_hash(const std::filesystem::path& file,
                                                       const std::filesystem::path& cache_dir,
                                                       bool* computed = nullptr);

/// The hash of what a tokenizer turns text into and back.
std::uint64_t tokenizer_hash(const backends::tokenizer& tok);

/// The fingerprint of `model` as `backend` loaded it.
expected<ipc::kv_fingerprint, std::string> fingerprint_of(const model_config& model,
                                                          const backends::backend& backend,
                                                          const std::filesystem::path& cache_dir);

} // namespace kvlane::actors
