#pragma once

// Options of the qbruntime backend (Mobilint ARIES) and their parser: the
// [model.qbruntime] table of a [[model]] with backend = "qbruntime". The table
// is read in every build, so a config stays valid whether or not this build
// has the backend; creating the backend is what needs it (backends::make_backend).

#include "common/config_reader.hpp"

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace kvlane::backends {

/// How the cores of one ARIES run a model (qbruntime's ModelConfig modes).
enum class qbr_core_mode : std::uint8_t {
  single,  ///< one core per Model (the only mode of Batch LLM models)
  global4, ///< one cluster of four cores
  global8, ///< both clusters
  automatic, ///< the runtime chooses (qbruntime >= 1.1)
};

std::string_view to_string(qbr_core_mode m) noexcept;

/// Whether the backend lets a transfer run while a step runs.
enum class qbr_concurrency : std::uint8_t {
  serialize, ///< one lock per Model around every runtime call (safe default)
  allow,     ///< transfers and steps may overlap (set only after `kvlane probe --verify`)
};

std::string_view to_string(qbr_concurrency c) noexcept;

struct qbruntime_options {
  std::string model_dir;        ///< absolute; holds the .mxq, tokenizer and embedding files
  std::string mxq;              ///< file in model_dir; empty = the only *.mxq there
  std::string embedding = "model.safetensors"; ///< safetensors file in model_dir (or absolute)
  std::string embedding_tensor; ///< empty = the only 2-D [vocab, hidden] tensor
  /// The Hugging Face tokenizer: a directory holding tokenizer.json or the file itself,
  /// relative to model_dir or absolute; empty = model_dir. "bytes" = the byte tokenizer
  /// (test models of the stand-in SDK only: a real model's ids mean nothing to it).
  std::string tokenizer;
  std::uint32_t dev_no = 0;     ///< accelerator device number
  qbr_core_mode core_mode = qbr_core_mode::single;
  std::vector<std::uint32_t> target_cores; ///< core i = cluster i / 4, core i % 4; empty = 0..handles-1
  std::uint32_t prefill_chunk = 0; ///< tokens per prefill row; 0 = the model's (at most 128 on Batch models)
  std::uint32_t handles = 1;    ///< Models on distinct cores; slot i = handle i (non-batch models)
  qbr_concurrency concurrency = qbr_concurrency::serialize;

  friend bool operator==(const qbruntime_options&, const qbruntime_options&) = default;
};

/// Cores of one ARIES (two clusters of four).
inline constexpr std::uint32_t qbr_core_count = 8;

/// Reads [model.qbruntime] of one [[model]] table (`model`) into `out`, which
/// holds the defaults. The table and its model_dir are required. Errors name
/// the key and its line.
config_reader::status parse_qbruntime_options(const config_reader::reporter& r,
                                              const config_reader::section& model,
                                              qbruntime_options& out);

} // namespace kvlane::backends
