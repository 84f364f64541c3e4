#pragma once

// kvlane::tools::bench — race_server_config: both servers of a race, configured alike.
//
// Problem it solves: a race of kvlaned against llama-server means something
// only if both run the same GGUF with the same threads, parallel sequences,
// context per sequence, batch, KV type, flash attention and host cache size.
// One settings value gives both: the kvlaned configuration (a kvlane.toml
// whose [[model]] uses the llamacpp backend, HTTP on a given loopback port, a
// private runtime directory, the snapshot store as large as llama-server's
// prompt cache) and llama-server's command line (non-unified KV: one
// `ctx_per_seq` stream per slot, as kvlane's slots; -b = -ub = batch, as
// kvlane's prefill chunk). A kvlane.toml of one's own can stand in for the
// generated one (--kvlane-config): its runtime directory and HTTP listener
// are replaced and the metrics listener turned off, the rest kept.
//
// Threading: plain functions over values.

#include "common/expected.hpp"

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace kvlane::tools::bench {

struct race_settings {
  std::string gguf;                 ///< absolute path of the model file
  std::string model_name = "bench"; ///< the name both servers answer to
  std::uint32_t threads = 2;        ///< -t, [model.llamacpp] threads
  std::uint32_t threads_batch = 2;  ///< -tb, threads_batch
  std::uint32_t parallel = 4;       ///< --parallel, slots
  std::uint32_t ctx_per_seq = 2048; ///< tokens per slot (llama-server -c is parallel x this)
  std::uint32_t batch = 512;        ///< -b and -ub, batch (and kvlane's max_step_tokens)
  std::string kv_type = "f16";      ///< f16 | q8_0 | f32
  std::string flash_attn = "auto";  ///< auto | on | off
  std::uint32_t cache_ram_mib = 2048; ///< llama-server --cache-ram; kvlane [store] max_bytes
};

/// Checks the values both servers accept (kv_type, flash_attn, non-zero counts).
expected<void, std::string> check_race_settings(const race_settings& s);

/// The generated kvlaned configuration: the llamacpp model `s`, HTTP on
/// 127.0.0.1:`port`, `runtime_dir` (absolute), loggers at `log_level` (the
/// daemon's own at info, for its "ready:" line).
std::string kvlaned_race_toml(const race_settings& s, const std::string& runtime_dir,
                              std::uint16_t port, std::string_view log_level);

/// A kvlane.toml of one's own (`toml`, read from `source`) with its
/// runtime_dir, [http] listen and [metrics] listen replaced as above. Fails
/// when the text is not TOML (the message names `source` and the line).
expected<std::string, std::string> adapt_kvlane_config(std::string_view toml, std::string_view source,
                                                      const std::string& runtime_dir,
                                                      std::uint16_t port);

/// llama-server's arguments (after the program) for `s` on 127.0.0.1:`port`.
std::vector<std::string> llama_server_args(const race_settings& s, std::uint16_t port);

} // namespace kvlane::tools::bench
