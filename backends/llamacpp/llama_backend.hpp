#pragma once

// kvlane::backends::llama_backend — a GGUF model through llama.cpp's ggml (backend kind
// "llamacpp", options in [model.llamacpp]).
//
// Problem it solves: real transformers on any box ggml drives (CPU, or a GPU with
// gpu_layers), under kvlane's scheduler, store and sampler. The mapping (docs/backends.md,
// "llamacpp"):
//  - slots are the sequence ids of one llama_context, each with its own KV stream of
//    `context` cells (a non-unified cache, as llama-server --parallel builds);
//  - a step is one llama_decode over every row — prefill chunks and decode tokens mixed —
//    asking logits for each row's last position only; the logits go to kvlane's sampler;
//  - the caller owns each slot's length: a row whose cache_len is below what the slot holds
//    trims the sequence's KV (llama_memory_seq_rm) before the step, which is a rollback;
//  - dump is llama_state_seq_get_data written straight into the caller's (the store's)
//    memory, load is llama_state_seq_set_data from it. A snapshot's size is affine in the
//    tokens it holds (a header, then per token its cell metadata and K/V rows), measured
//    once at create() and reported as info().snapshot_header_bytes + bytes_per_token.
//
// Thread contract: that of backend. One llama_context cannot run a transfer while it
// decodes, so step, dump and load take one mutex and caps.transfer_overlaps_compute is
// false: the scheduler learns that switches serialize, as on a device that cannot overlap.
// Embeddings (embed()) run in a second context on a worker of their own (llama_embedder),
// one batch at a time under that mutex, taking turns with step().

#include "backends/backend.hpp"
#include "backends/llamacpp/gguf_tokenizer.hpp"
#include "backends/llamacpp/llama_embedder.hpp"
#include "backends/llamacpp_options.hpp"

#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

struct llama_model;
struct llama_context;

namespace kvlane::backends {

class llama_backend final : public backend {
public:
  /// Loads the GGUF and creates the context. invalid_argument names a missing or unreadable
  /// file, an architecture llama.cpp cannot load, or a model that is not a decoder LM.
  static expected<std::unique_ptr<llama_backend>, backend_error> create(std::string model_name,
                                                                         const llamacpp_options& opts);

  llama_backend(const llama_backend&) = delete;
  llama_backend& operator=(const llama_backend&) = delete;
  ~llama_backend() override;

  const backend_info& info() const noexcept override { return info_; }
  const tokenizer& tokens() const noexcept override { return *tokenizer_; }

  /// The GGUF's chat template (tokenizer.chat_template), or the configured file's text;
  /// empty when there is none.
  const std::string& chat_template() const noexcept { return chat_template_; }
  /// The model as llama.cpp describes it, e.g. "llama 134M F16".
  const std::string& description() const noexcept { return description_; }
  /// Parameters of the model.
  std::uint64_t parameters() const noexcept { return parameters_; }

  /// Test API: fail this fraction of dump() and load() calls from now on (seeded,
  /// deterministic per call number), as a device whose transfers fail would: a failed dump
  /// leaves the slot as it was, a failed load leaves it empty. 0 turns it off.
  void inject_transfer_faults(double rate, std::uint64_t seed = 1);
  /// Transfers failed by inject_transfer_faults so far.
  std::uint64_t injected_faults() const noexcept;

  expected<void, backend_error> step(std::span<const step_row> rows, step_output& out) override;
  expected<std::size_t, backend_error> dump(slot_id slot, std::uint32_t cache_len,
                                            std::span<std::byte> destination) override;
  expected<void, backend_error> load(slot_id slot, std::uint32_t cache_len,
                                     std::span<const std::byte> source) override;
  /// Checks the inputs, then queues the job on the embedding worker; `done` runs there.
  void embed(embedding_job job) override;

  /// Test API: the embedding worker.
  llama_embedder& embedder() noexcept { return *embedder_; }

private:
  struct model_deleter {
    void operator()(llama_model* m) const noexcept;
  };
  struct context_deleter {
    void operator()(llama_context* c) const noexcept;
  };

  llama_backend() = default;

  /// Trims `slot` to `cache_len` tokens (a rollback); a no-op when it holds exactly that.
  void trim_locked(slot_id slot, std::uint32_t cache_len);
  /// An injected transfer fault for this call, if one is due (holds mutex_).
  std::optional<backend_error> take_fault_locked(std::string_view op);
  /// Measures snapshot_header_bytes and bytes_per_token with two probe decodes on slot 0.
  expected<void, backend_error> calibrate_snapshots();

  std::unique_ptr<llama_model, model_deleter> model_;
  std::unique_ptr<llama_context, context_deleter> context_;
  std::unique_ptr<gguf_tokenizer> tokenizer_;
  backend_info info_;
  std::string chat_template_;
  std::string description_;
  std::uint64_t parameters_ = 0;

  mutable std::mutex mutex_;         ///< one llama_context: step, dump and load serialize
  std::vector<std::uint32_t> held_;  ///< tokens each slot's KV holds, as the context has it
  std::vector<std::int32_t> batch_tokens_; ///< the step's llama_batch arrays, reused
  std::vector<std::int32_t> batch_pos_;
  std::vector<std::int32_t> batch_n_seq_;
  std::vector<std::int32_t> batch_seq_;
  std::vector<std::int32_t*> batch_seq_ptr_;
  std::vector<std::int8_t> batch_logits_;
  std::vector<std::uint8_t> step_slot_used_; ///< a step's slots seen so far (validation)
  std::vector<std::int32_t> step_last_;      ///< each row's last batch index (its logits)
  std::vector<std::uint32_t> step_order_;    ///< the step's rows in slot order
  double fault_rate_ = 0;            ///< guarded by mutex_
  std::uint64_t fault_rng_ = 0;
  std::uint64_t injected_ = 0;
  device_turns turns_{mutex_};       ///< step() lets a waiting embedding batch go first
  /// Declared last: its worker, which decodes with model_, is joined first.
  std::unique_ptr<llama_embedder> embedder_;
};

} // namespace kvlane::backends
