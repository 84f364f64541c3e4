#pragma once

// Options of the llamacpp backend (GGUF models through llama.cpp's ggml): the
// [model.llamacpp] table of a [[model]] with backend = "llamacpp". The table is
// read in every build, so a config stays valid whether or not this build has
// the backend; creating the backend is what needs it (backends::make_backend).
// The keys follow llama-server's flags where one exists (named beside each).

#include "common/config_reader.hpp"

#include <cstdint>
#include <string>
#include <string_view>

namespace kvlane::backends {

/// The KV cache's element type (llama-server -ctk/-ctv).
enum class llama_kv_type : std::uint8_t { f16, q8_0, f32 };

/// Flash attention (llama-server -fa).
enum class llama_flash_attn : std::uint8_t { automatic, on, off };

std::string_view to_string(llama_kv_type t) noexcept;
std::string_view to_string(llama_flash_attn f) noexcept;

struct llamacpp_options {
  std::string gguf;                  ///< absolute path of the .gguf model file (-m)
  std::uint32_t slots = 4;           ///< parallel sequences, one KV stream each (--parallel)
  std::uint32_t context = 4096;      ///< tokens per slot; 0 = the model's training context
  std::uint32_t threads = 0;         ///< decode threads (-t); 0 = the machine's cores
  std::uint32_t threads_batch = 0;   ///< prompt threads (-tb); 0 = threads
  std::uint32_t batch = 512;         ///< tokens per ggml graph (-ub), and the largest prefill chunk
  llama_kv_type kv_type = llama_kv_type::f16;
  llama_flash_attn flash_attn = llama_flash_attn::automatic;
  std::uint32_t gpu_layers = 0;      ///< layers offloaded to a GPU ggml drives (-ngl); 0 = CPU
  bool mmap = true;                  ///< map the file rather than read it (--no-mmap)
  bool mlock = false;                ///< lock the weights in RAM (--mlock)
  /// The Jinja chat template to use instead of the GGUF's own: empty = the GGUF's
  /// (tokenizer.chat_template), else an absolute path of a template file (--chat-template-file).
  std::string chat_template_file;

  friend bool operator==(const llamacpp_options&, const llamacpp_options&) = default;
};

/// Reads [model.llamacpp] of one [[model]] table (`model`) into `out`, which
/// holds the defaults. The table and its gguf are required. Errors name the
/// key and its line.
config_reader::status parse_llamacpp_options(const config_reader::reporter& r,
                                             const config_reader::section& model,
                                             llamacpp_options& out);

} // namespace kvlane::backends
