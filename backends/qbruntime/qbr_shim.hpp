#pragma once

// kvlane::backends::qbr — the qbruntime calls kvlane makes, behind types of its own.
//
// Problem it solves: some C++ forms of qbruntime are undocumented (the batch infer and the
// per-slot dump/load of qbruntime >= 1.2). qbr_shim.cpp is the only file that includes
// <qbruntime/qbruntime.h>; it calls the forms CMake found at configure time
// (cmake/Qbruntime.cmake) and reports here which exist. Nothing in this header depends on
// the SDK. Status codes travel as their numbers (the documented ones are mapped by the
// adapter, qbr_backend.cpp).
//
// Thread contract: none of its own. A model_handle forwards to one qbruntime Model; the
// caller decides which calls may run at once.

#include "common/expected.hpp"

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

namespace kvlane::backends::qbr {

/// A failed runtime call: the StatusCode number and its name (when the SDK can say).
struct runtime_error {
  int code = 0;
  std::string text;
};

using status = expected<void, runtime_error>;

/// The runtime's version ("1.5.0"); the stand-in's ends in "-fake".
std::string runtime_version();

/// This build found an infer that takes one BatchParam per row.
bool has_batch_infer() noexcept;

/// This build found a dump/load of one cache_id of a Batch model.
bool has_slot_transfer() noexcept;

/// ModelConfig::setAutoCoreMode exists (qbruntime >= 1.1).
bool has_auto_core_mode() noexcept;

enum class core_mode : std::uint8_t { single, global4, global8, automatic };

struct placement {
  core_mode mode = core_mode::single;
  std::vector<std::uint32_t> cores; ///< single: core i = cluster i / 4, core i % 4
};

struct cache_layer {
  std::uint64_t hash = 0;
  std::uint64_t bytes = 0; ///< as reported; per slot or per model is not documented
};

/// What the model says about itself after launch.
struct geometry {
  bool batch = false;            ///< CacheType::Batch
  std::uint32_t num_batches = 1; ///< KV slots of a Batch model
  std::uint32_t max_width = 0;   ///< tokens per infer
  std::uint32_t max_cache_size = 0;
  std::vector<std::int64_t> input_shape;  ///< of input 0; -1 = dynamic
  std::vector<std::int64_t> output_shape; ///< of output 0
  std::vector<cache_layer> layers;
};

struct batch_row {
  std::uint32_t sequence_length = 0;
  std::uint32_t cache_size = 0;
  std::uint32_t cache_id = 0;
};

/// A read-only view of output 0 of the last infer; valid until the next infer.
struct output_view {
  const float* data = nullptr;
  std::size_t size = 0;
};

/// One accelerator device (qbruntime Accelerator). Outlives the models launched on it.
class device {
public:
  static expected<std::unique_ptr<device>, runtime_error> open(int dev_no);
  ~device();

  struct impl;
  impl& get() noexcept { return *impl_; }

private:
  explicit device(std::unique_ptr<impl> i);
  std::unique_ptr<impl> impl_;
};

/// One launched qbruntime Model.
class model_handle {
public:
  static expected<std::unique_ptr<model_handle>, runtime_error>
  open(device& dev, const std::string& mxq_path, const placement& where);
  ~model_handle();

  const geometry& shape() const noexcept { return geometry_; }

  /// One row (non-batch models): `input` holds `tokens` rows of the hidden size,
  /// passed with the model's input rank.
  status infer(std::span<float> input, std::uint32_t tokens, std::uint32_t cache_size);
  /// Several rows (Batch models; only when has_batch_infer()).
  status infer_batch(std::span<float> input, std::uint32_t tokens, std::span<const batch_row> rows);
  output_view output() const noexcept;

  /// Whole cache (non-batch models).
  status dump(std::vector<std::vector<std::int8_t>>& layers);
  status load(const std::vector<std::vector<std::int8_t>>& layers);
  /// One slot of a Batch model (only when has_slot_transfer()).
  status dump_slot(std::uint32_t cache_id, std::vector<std::vector<std::int8_t>>& layers);
  status load_slot(std::uint32_t cache_id, const std::vector<std::vector<std::int8_t>>& layers);

  struct impl;

private:
  model_handle(std::unique_ptr<impl> i, geometry g);
  std::unique_ptr<impl> impl_;
  geometry geometry_;
};

} // namespace kvlane::backends::qbr
