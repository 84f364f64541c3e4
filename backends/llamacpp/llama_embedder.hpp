#pragma once

// kvlane::backends::llama_embedder — pooled embeddings for llama_backend, beside serving.
//
// Problem it solves: an embedding needs a llama_context that outputs every token's final
// hidden state (`embeddings = true`), which serving does not; it must not hold up the compute
// lane's steps for more than a bounded time; and serving must not pay for it when nobody
// asks. Three further constraints shape it:
//  - each thread that decodes keeps a team of OpenMP workers while it lives, and a second
//    team beside the compute lane's throttles ggml's barriers (docs/backends.md, "Threads"):
//    so every embedding decode runs on one worker thread of this class, never on the
//    caller's, and that worker ends after `idle_exit` without work, taking its team with it
//    (the next job starts it again);
//  - the context is created by the worker on its first job: until then nothing is allocated;
//  - one decode is at most `batch` tokens and runs under the backend's device mutex, taking
//    turns with step() through device_turns: the compute lane waits for at most one
//    embedding batch between two of its steps, and a busy lane cannot starve the worker.
// Pooling is the mean of the input's final hidden states (what llama.cpp's mean pooling
// averages), summed across batches in double so an input may span several, then
// L2-normalised. The context runs with pooling "none" for that reason: llama.cpp pools per
// micro-batch, and one micro-batch as long as the context would need a logits buffer of
// context x vocabulary floats.
//
// Threading: submit() from any thread; jobs run one at a time in submission order; a job's
// `done` runs on the worker (or on the caller's thread for a job refused at once). The
// destructor fails queued jobs (device_failure) and joins the worker after its current job.

#include "backends/backend.hpp"

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

struct llama_context;

namespace kvlane::backends {

/// Lets the embedding worker take the device mutex between two steps. With a plain mutex the
/// compute lane, which locks again microseconds after it unlocks, could keep the worker out
/// for as long as sequences run.
///
/// Threading: before_step() from the compute lane; take() from the embedding worker.
class device_turns {
public:
  explicit device_turns(std::mutex& device) noexcept : device_(device) {}
  device_turns(const device_turns&) = delete;
  device_turns& operator=(const device_turns&) = delete;

  /// The compute lane, before it locks the device: if an embedding batch waits for the
  /// device, returns once that batch holds it (so the step then waits for that batch only).
  /// One atomic load when no embedding waits.
  void before_step();
  /// The embedding worker: the device, locked.
  std::unique_lock<std::mutex> take();
  /// Whether an embedding batch waits for the device now (tests).
  bool waiting() const noexcept { return waiting_.load(std::memory_order_acquire); }

private:
  std::mutex& device_;
  std::atomic<bool> waiting_{false};
  std::mutex mu_;
  std::condition_variable cv_;
};

class llama_embedder {
public:
  struct settings {
    std::string model;                  ///< the model's name, for messages
    std::uint32_t dimension = 0;        ///< floats per hidden state (the model's n_embd)
    std::uint32_t batch = 64;           ///< tokens per decode
    std::chrono::milliseconds idle_exit{5000}; ///< the worker ends after this long without work
    std::size_t max_queued = 64;        ///< jobs waiting; more are refused (out_of_memory)
  };
  /// Creates the embedding context (one sequence, embeddings on, pooling none, `batch`
  /// tokens per decode); nullptr when llama.cpp cannot. Called on the worker.
  using context_factory = std::function<llama_context*()>;

  llama_embedder(settings s, context_factory make, device_turns& turns);
  ~llama_embedder();
  llama_embedder(const llama_embedder&) = delete;
  llama_embedder& operator=(const llama_embedder&) = delete;

  /// Queues `job` (its inputs already checked by the caller). Refused at once, on this
  /// thread: out_of_memory when max_queued jobs wait, device_failure while shutting down.
  void submit(embedding_job job);

  /// Test API: whether the worker thread runs now.
  bool worker_running() const;
  /// Test API: waits up to `timeout` for the worker to end (idle); true once it has.
  bool wait_until_idle(std::chrono::milliseconds timeout);
  /// Test API: the idle time after which the worker ends, from its next wait on.
  void set_idle_exit(std::chrono::milliseconds idle);
  /// Test API: batches decoded so far.
  std::uint64_t batches() const noexcept { return batches_.load(std::memory_order_relaxed); }

private:
  struct context_deleter {
    void operator()(llama_context* c) const noexcept;
  };

  void work();
  expected<embeddings, backend_error> run(const embedding_job& job);

  const settings settings_;
  const context_factory make_;
  device_turns& turns_;
  std::unique_ptr<llama_context, context_deleter> context_; ///< worker only
  // The decode's llama_batch arrays, reused (worker only).
  std::vector<std::int32_t> tokens_, positions_, n_seq_, seq_;
  std::vector<std::int32_t*> seq_ptr_;
  std::vector<std::int8_t> outputs_;
  std::vector<double> sum_;
  std::atomic<std::uint64_t> batches_{0};

  mutable std::mutex mu_;
  std::condition_variable cv_;      ///< work arrived, or stopping
  std::condition_variable ended_;   ///< the worker ended (wait_until_idle)
  std::deque<embedding_job> queue_;
  std::chrono::milliseconds idle_exit_;
  bool running_ = false;  ///< the worker runs (it clears this itself when it ends)
  bool stopping_ = false;
  std::thread worker_;
};

} // namespace kvlane::backends
