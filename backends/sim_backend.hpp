#pragma once

// kvlane::backends::sim_backend — a simulated NPU (backend kind "sim").
//
// Problem it solves: the scheduler, the snapshot store and the whole daemon
// must be developed and tested without the hardware, yet a wrong save/restore
// must show up as wrong output. So the sim has real KV memory: one lazily
// committed anonymous mapping of slots * snapshot_bytes; every step writes a
// small record at each new position, chaining a hash read back from the
// previous position's KV bytes, and the logits are a deterministic function
// of what the KV memory holds at the row's last position. A load re-derives
// every restored position from its predecessor and folds any damaged record
// into the chain, so the next token depends on every written position:
// restoring the right snapshot continues the sequence exactly; restoring a
// wrong one, or one damaged at any position, diverges.
//
// Timing follows a model with every number in sim_options (see
// docs/backends.md): real work counts toward an operation's modeled duration
// and the call sleeps only the remainder. opts.overlap decides how a transfer
// and a step interact (independent, mutually exclusive, or sharing speed).
//
// Embeddings (embed()) are deterministic stand-ins computed at once on the
// calling thread, without modeled time: feature hashing of the input's tokens
// and token bigrams into embedding_dimension signed buckets, plus a small
// component seeded by a hash of the whole token sequence, L2-normalised. The
// same tokens give the same vector (for the same seed), different tokens a
// different one, and texts that share many bytes point in similar directions.
//
// Thread contract: that of backend (one compute thread calls step(), one
// transfer thread calls dump()/load(), concurrently, never on the same slot).
// inject(), counters() and embed() are callable from any thread.

#include "backends/backend.hpp"
#include "backends/byte_tokenizer.hpp"
#include "backends/sim_options.hpp"

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace kvlane::backends {

/// An operation of the sim, for fault injection.
enum class sim_op : std::uint8_t { step, dump, load };

std::string_view to_string(sim_op op) noexcept;

/// Successful operations and injected failures since creation.
struct sim_counters {
  std::uint64_t steps = 0;
  std::uint64_t dumps = 0;
  std::uint64_t loads = 0;
  std::uint64_t injected_faults = 0;
};

class sim_backend final : public backend {
public:
  /// Length of the sim's embeddings (info().caps.embedding_dimension).
  static constexpr std::uint32_t embedding_dimension = 256;

  /// Validates `opts` (invalid_argument naming the bad field) and reserves the
  /// KV memory (out_of_memory if the address space is not available).
  static expected<std::unique_ptr<sim_backend>, backend_error> create(std::string model_name,
                                                                       const sim_options& opts);

  sim_backend(const sim_backend&) = delete;
  sim_backend& operator=(const sim_backend&) = delete;
  ~sim_backend() override;

  const backend_info& info() const noexcept override { return info_; }
  const tokenizer& tokens() const noexcept override { return tokenizer_; }
  const sim_options& options() const noexcept { return opts_; }

  expected<void, backend_error> step(std::span<const step_row> rows, step_output& out) override;
  expected<std::size_t, backend_error> dump(slot_id slot, std::uint32_t cache_len,
                                            std::span<std::byte> destination) override;
  expected<void, backend_error> load(slot_id slot, std::uint32_t cache_len,
                                     std::span<const std::byte> source) override;
  /// Answers on the calling thread, before returning.
  void embed(embedding_job job) override;

  /// Test API: replaces the fault spec of `op` and resets its call counter
  /// (and its fault RNG), so the next call of `op` is call 1 again.
  void inject(sim_op op, fault_spec spec);

  sim_counters counters() const noexcept;

private:
  /// An anonymous private mapping, reserved but not committed (MAP_NORESERVE).
  class kv_region {
  public:
    kv_region() = default;
    kv_region(std::byte* base, std::size_t size) noexcept : base_(base), size_(size) {}
    kv_region(kv_region&& other) noexcept;
    kv_region& operator=(kv_region&& other) noexcept;
    ~kv_region();
    std::byte* data() const noexcept { return base_; }
    std::size_t size() const noexcept { return size_; }

  private:
    std::byte* base_ = nullptr;
    std::size_t size_ = 0;
  };

  /// Fault state of one operation; guarded by its own mutex because inject()
  /// may come from any thread.
  struct fault_state {
    std::mutex mutex;
    fault_spec spec;
    std::uint64_t calls = 0;
    std::uint64_t rng = 0;
  };

  sim_backend(std::string model_name, const sim_options& opts, kv_region memory);

  /// Counts a call of `op`; returns the error to report if it must fail.
  std::optional<backend_error> take_fault(sim_op op);
  /// The error to report if a row of the step carries the step fault's token.
  std::optional<backend_error> take_token_fault(std::span<const step_row> rows);

  /// Sleeps until an operation of `wall_ns` (modeled, already scaled), begun
  /// at `start`, is over, honouring the overlap mode. `transfer` says which
  /// kind of operation is running.
  void finish_at(std::int64_t start_ns, double wall_ns, bool transfer);

  std::byte* slot_base(slot_id slot) const noexcept;
  std::byte* position(slot_id slot, std::uint32_t pos) const noexcept;
  /// After a load: re-derives every restored position from its predecessor
  /// and folds any damage into the chain (transfer lane only).
  void recheck_chain(slot_id slot, std::uint32_t cache_len);
  void write_logits(slot_id slot, std::uint32_t last_pos, std::span<float> logits) const;
  double transfer_wall_ns(double min_ms, double max_ms, std::uint32_t cache_len,
                          std::uint64_t& rng) const;

  sim_options opts_;
  backend_info info_;
  byte_tokenizer tokenizer_;
  kv_region memory_;
  std::uint64_t seed_key_ = 0;

  std::vector<std::uint64_t> seen_slots_; ///< step() scratch (compute lane only)
  std::uint64_t step_epoch_ = 0;          ///< compute lane only
  std::uint64_t dump_rng_ = 0;           ///< transfer lane only
  std::uint64_t load_rng_ = 0;           ///< transfer lane only

  std::mutex device_mutex_; ///< overlap none: held by a step or a transfer for its whole duration
  std::atomic<bool> compute_active_{false};
  std::atomic<bool> transfer_active_{false};

  fault_state faults_[3];

  std::atomic<std::uint64_t> steps_{0};
  std::atomic<std::uint64_t> dumps_{0};
  std::atomic<std::uint64_t> loads_{0};
  std::atomic<std::uint64_t> injected_faults_{0};
};

} // namespace kvlane::backends
