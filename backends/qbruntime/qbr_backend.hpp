#pragma once

// kvlane::backends::qbr_backend — a Mobilint .mxq LLM on an ARIES accelerator through
// qbruntime (backend kind "qbruntime", options in [model.qbruntime]).
//
// Problem it solves: maps kvlane's step/dump/load onto qbruntime's Model (docs/backends.md,
// "qbruntime"). A step looks up each token's embedding on the host (model.safetensors,
// mapped) and runs one infer: one BatchParam per row on a Batch model, or one infer per
// row on models without batching, where slot i is handle i (a Model per core). Logits are
// read from either output layout (last position per row, or every position). Snapshots
// are the runtime's per-layer cache buffers laid back to back; their size is calibrated
// by one dump at create(). Without a per-slot dump (the SDK's form was not found at build
// time) a Batch model reports caps.snapshots = false and the scheduler recomputes.
//
// Thread contract: that of backend. With concurrency = "serialize" (the default) every
// runtime call on one Model holds that Model's mutex, and caps.transfer_overlaps_compute
// is false; "allow" takes no lock (set it only after `kvlane probe --verify` passed).
//
// Tokens: the model's own Hugging Face tokenizer (tokenizer.json beside the .mxq, or
// [model.qbruntime] tokenizer), whose ids must fit the model's logits width.

#include "backends/backend.hpp"
#include "backends/qbruntime/qbr_shim.hpp"
#include "backends/qbruntime/safetensors.hpp"
#include "backends/qbruntime_options.hpp"

#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace kvlane::backends {

/// The backend error a qbruntime StatusCode number maps to (cache overflow, memory,
/// snapshot mismatch, timeout; anything else is device_failure).
backend_errc qbr_error_code(int status) noexcept;

class qbr_backend final : public backend {
public:
  /// Opens the device, the model(s) and the embedding table. invalid_argument names a
  /// missing file, a bad geometry, or a Batch model this build cannot drive.
  static expected<std::unique_ptr<qbr_backend>, backend_error> create(std::string model_name,
                                                                       const qbruntime_options& opts);

  qbr_backend(const qbr_backend&) = delete;
  qbr_backend& operator=(const qbr_backend&) = delete;
  ~qbr_backend() override;

  const backend_info& info() const noexcept override { return info_; }
  const tokenizer& tokens() const noexcept override { return *tokenizer_; }
  /// qbruntime's version, as getQbRuntimeVersion() reports it (also info().runtime_version).
  const std::string& runtime_version() const noexcept { return info_.runtime_version; }
  /// The model is a Batch model (one Model, num_batches slots).
  bool batch() const noexcept { return batch_; }

  expected<void, backend_error> step(std::span<const step_row> rows, step_output& out) override;
  expected<std::size_t, backend_error> dump(slot_id slot, std::uint32_t cache_len,
                                            std::span<std::byte> destination) override;
  expected<void, backend_error> load(slot_id slot, std::uint32_t cache_len,
                                     std::span<const std::byte> source) override;

private:
  struct handle {
    std::unique_ptr<qbr::model_handle> model;
    std::mutex mutex; ///< held around runtime calls with concurrency = "serialize"
  };

  qbr_backend(qbruntime_options opts, safetensors::embedding_table embedding);

  std::unique_lock<std::mutex> guard(handle& h);
  handle& handle_of(slot_id slot) noexcept { return *handles_[batch_ ? 0 : slot]; }
  expected<void, backend_error> validate(std::span<const step_row> rows);
  void embed(std::span<const token_id> tokens, float* out) const noexcept;
  expected<void, backend_error> copy_logits(qbr::output_view view, std::size_t position,
                                            std::size_t positions, std::span<float> row) const;
  expected<void, backend_error> transfer_dump(slot_id slot);

  qbruntime_options opts_;
  safetensors::embedding_table embedding_;
  std::unique_ptr<qbr::device> device_;
  std::vector<std::unique_ptr<handle>> handles_;
  backend_info info_;
  std::unique_ptr<tokenizer> tokenizer_;
  bool batch_ = false;
  std::uint32_t hidden_ = 0;
  std::vector<std::uint64_t> layer_bytes_; ///< calibrated at create()

  std::vector<float> input_;                     ///< compute lane scratch
  std::vector<qbr::batch_row> params_;           ///< compute lane scratch
  std::vector<std::uint64_t> seen_;              ///< compute lane: epoch a slot was last named
  std::uint64_t epoch_ = 0;
  std::vector<std::vector<std::int8_t>> layers_; ///< transfer lane scratch
};

} // namespace kvlane::backends
