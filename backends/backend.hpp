#pragma once

// kvlane::backends::backend — the NPU interface, modelled on qbruntime.
//
// Problem it solves: the scheduler must drive very different devices (the
// simulated NPU, Mobilint ARIES through qbruntime, later others) through one
// narrow surface that says exactly what the hardware can do.
//
// Ownership model (as in qbruntime): the backend owns the KV memory of a fixed
// number of slots; the caller owns each slot's length (`cache_len`). There is
// no reset call: a new sequence starts with cache_len = 0, a rollback passes a
// smaller cache_len. Snapshots are opaque bytes in caller-provided host memory.
//
// Thread contract:
//  - info() and snapshot_size() are const, cheap and callable from any thread.
//  - step() is called by one thread at a time: the compute lane.
//  - dump() and load() are called by one thread at a time: the transfer lane.
//  - The compute lane and the transfer lane may call concurrently, but never
//    on the same slot: a slot being dumped or loaded appears in no step row.
//    Every implementation must be safe under that concurrency; if the device
//    cannot overlap a transfer with compute, the implementation serializes
//    internally and reports info().caps.transfer_overlaps_compute = false, so
//    the scheduler knows concurrency gains nothing and plans serialized switches.
//  - embed() is callable from any thread, concurrently with everything above;
//    the backend decides where the work runs (docs/backends.md, "Embeddings").
//  - Errors are values; no method throws.

#include "common/expected.hpp"

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace kvlane::backends {

using token_id = std::uint32_t;
using slot_id = std::uint32_t;

struct chat_message; // chat_format.hpp
struct chat_tool;    // chat_format.hpp

enum class backend_errc : std::uint8_t {
  context_overflow = 1, ///< cache_len + tokens exceeds the slot's max context
  out_of_memory,        ///< device or host memory exhausted
  snapshot_mismatch,    ///< snapshot buffer has the wrong size or identity
  device_timeout,       ///< the device did not answer in time
  invalid_argument,     ///< bad slot, empty row, chunk too large, duplicate slot
  device_failure,       ///< any other device error (also used by fault injection)
};

/// Stable lower-case name, e.g. "context_overflow".
std::string_view to_string(backend_errc code) noexcept;

struct backend_error {
  backend_errc code = backend_errc::device_failure;
  std::string message;
};

/// What a snapshot covers.
enum class snapshot_extent : std::uint8_t {
  full_slot,   ///< always snapshot_bytes, whatever cache_len is (qbruntime)
  used_length, ///< cache_len * bytes_per_token
};

std::string_view to_string(snapshot_extent e) noexcept;

struct capabilities {
  /// A dump/load on one slot may run while step() runs on other slots, and
  /// gains real concurrency from doing so.
  bool transfer_overlaps_compute = false;
  snapshot_extent extent = snapshot_extent::full_slot;
  /// dump() and load() work. When false (a device without per-slot transfers) they
  /// fail with invalid_argument, and the scheduler preempts by recompute only.
  bool snapshots = true;
  /// Length of the vectors embed() produces; 0: the backend cannot produce embeddings
  /// (embed() fails with invalid_argument).
  std::uint32_t embedding_dimension = 0;
};

struct backend_info {
  std::string kind;                  ///< "sim", "qbruntime", ...
  std::string model;                 ///< configured model name
  std::string runtime_version;       ///< the device runtime's version (qbruntime); empty for the sim
  std::uint64_t identity = 0;        ///< fingerprint of model + geometry, stored in snapshots
  std::uint32_t slots = 0;           ///< KV slots (qbruntime num_batches)
  std::uint32_t max_context = 0;     ///< tokens per slot
  std::uint32_t max_prefill_chunk = 0; ///< max tokens in one row of a step
  std::uint32_t vocab_size = 0;      ///< logits per output row
  std::uint64_t snapshot_bytes = 0;  ///< bytes of a full-slot snapshot
  std::uint64_t bytes_per_token = 0; ///< KV bytes per position (snapshot_bytes / max_context)
  /// used_length snapshots: bytes a non-empty snapshot holds besides its tokens' KV (a
  /// runtime's own header, e.g. llama.cpp's per-layer types). 0 for the sim and qbruntime.
  std::uint64_t snapshot_header_bytes = 0;
  capabilities caps;
};

/// One row of a step: append `tokens` to `slot` after its first `cache_len`
/// positions. A decode row has one token, a prefill chunk up to
/// max_prefill_chunk tokens.
struct step_row {
  slot_id slot = 0;
  std::uint32_t cache_len = 0;
  std::span<const token_id> tokens;
};

/// Result of a step: one logits row (vocab_size floats) per input row, in row
/// order, for the last position the row wrote. Sampling is the caller's job.
/// Reused across steps to avoid allocation on the hot path.
class step_output {
public:
  void reset(std::size_t rows, std::uint32_t vocab) {
    rows_ = rows;
    vocab_ = vocab;
    logits_.resize(rows * vocab);
  }
  std::size_t rows() const noexcept { return rows_; }
  std::uint32_t vocab() const noexcept { return vocab_; }
  std::span<float> row(std::size_t i) noexcept { return {logits_.data() + i * vocab_, vocab_}; }
  std::span<const float> row(std::size_t i) const noexcept {
    return {logits_.data() + i * vocab_, vocab_};
  }

private:
  std::vector<float> logits_;
  std::size_t rows_ = 0;
  std::uint32_t vocab_ = 0;
};

/// Turns text into tokens and back. Owned by the backend (a model's tokenizer
/// belongs to the model). Immutable after construction: every method is safe
/// from any thread.
class tokenizer {
public:
  virtual ~tokenizer() = default;
  /// parse_special = false (the default, for untrusted text): every byte is
  /// text, the result never contains a special/added token id. true: special
  /// tokens written in the text are recognised (Hugging Face `encode`
  /// behaviour). Never adds BOS: callers prepend bos() when they want it.
  virtual std::vector<token_id> encode(std::string_view text, bool parse_special = false) const = 0;
  /// Raw bytes of the tokens (a token may end mid UTF-8 sequence; the stream
  /// assembles UTF-8). Special tokens and ids outside the vocabulary decode to nothing.
  virtual std::string decode(std::span<const token_id> tokens) const = 0;
  /// The BOS a prompt starts with, if this tokenizer's post-processor adds one
  /// (Llama 3: yes, Qwen: no).
  virtual std::optional<token_id> bos() const noexcept = 0;
  /// Tokens that end generation (generation_config eos_token_id may list several).
  virtual std::span<const token_id> stop_tokens() const noexcept = 0;
  /// The id of a special/added token given its text ("<|im_end|>"), if any.
  virtual std::optional<token_id> special_token(std::string_view text) const noexcept = 0;
  /// Ids below size() are valid; a model's logits row may be wider (the
  /// sampler masks the tail).
  virtual std::uint32_t size() const noexcept = 0;
  /// The model's own Jinja chat template (a GGUF's tokenizer.chat_template), empty
  /// when the tokenizer does not carry one.
  virtual std::string_view chat_template() const noexcept { return {}; }
  /// The prompt tokens chat_template() writes for `messages` and the functions `tools` the
  /// model may call (Jinja, through llama.cpp's engine; jinja_template.hpp says how tools and
  /// calls reach the template): special tokens read in the template's own text only, message
  /// content encoded as text. invalid_argument when the tokenizer carries no template, this
  /// build has no Jinja engine, or the template fails (its message).
  virtual expected<std::vector<token_id>, backend_error>
  apply_chat_template(std::span<const chat_message> messages, std::span<const chat_tool> tools,
                      bool add_generation_prompt) const;
};

/// Pooled embeddings of several inputs: `dimension` floats per input, in input order,
/// each row of unit length (L2).
struct embeddings {
  std::uint32_t dimension = 0;
  std::vector<float> values; ///< inputs x dimension
  std::span<const float> row(std::size_t i) const noexcept {
    return {values.data() + i * dimension, dimension};
  }
};

/// What embed() is asked to do. `done` is called exactly once: on the calling thread before
/// embed() returns, or later on a thread of the backend's own; it must not block for long
/// (it runs where the next request's work would). `cancelled`, when set, is polled between
/// batches from that thread; once it answers true the job ends early with device_failure.
struct embedding_job {
  std::vector<std::vector<token_id>> inputs; ///< each 1..info().max_context tokens of the vocabulary
  std::function<bool()> cancelled;
  std::function<void(expected<embeddings, backend_error>)> done;
};

/// Why `inputs` cannot be embedded by a backend described by `info`, if they cannot: no
/// inputs, an empty input, one longer than max_context, a token outside the vocabulary
/// (invalid_argument naming the input).
std::optional<backend_error> check_embedding_inputs(const backend_info& info,
                                                    std::span<const std::vector<token_id>> inputs);

/// Scales `v` to unit length. False (and `v` unchanged) when its length is 0 or not finite.
bool l2_normalize(std::span<float> v) noexcept;

class backend {
public:
  virtual ~backend() = default;

  virtual const backend_info& info() const noexcept = 0;
  virtual const tokenizer& tokens() const noexcept = 0;

  /// Bytes dump() writes (and load() expects) for a slot holding cache_len tokens:
  /// snapshot_bytes for a full_slot extent; for used_length, 0 for an empty slot and
  /// snapshot_header_bytes + cache_len * bytes_per_token otherwise.
  std::size_t snapshot_size(std::uint32_t cache_len) const noexcept;

  /// Runs one step over `rows` (distinct slots). On success `out` holds one
  /// logits row per input row. On failure no slot is advanced.
  virtual expected<void, backend_error> step(std::span<const step_row> rows, step_output& out) = 0;

  /// Copies the KV of `slot` (holding cache_len tokens) into `destination`,
  /// which must hold at least snapshot_size(cache_len) bytes. Returns the bytes written.
  virtual expected<std::size_t, backend_error> dump(slot_id slot, std::uint32_t cache_len,
                                                    std::span<std::byte> destination) = 0;

  /// Restores `slot` from a snapshot of exactly snapshot_size(cache_len) bytes.
  virtual expected<void, backend_error> load(slot_id slot, std::uint32_t cache_len,
                                             std::span<const std::byte> source) = 0;

  /// Computes the pooled, L2-normalised embedding of each of `job.inputs` (see
  /// embedding_job for when `job.done` runs). A backend without the capability
  /// (info().caps.embedding_dimension == 0) keeps this default, which answers
  /// invalid_argument naming the model and its kind.
  virtual void embed(embedding_job job);
};

} // namespace kvlane::backends
