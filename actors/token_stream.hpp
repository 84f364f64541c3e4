#pragma once

// kvlane::actors::token_stream — the consumer end of one request, in process.
//
// The session actor pushes tokens and the end into it; any thread reads them
// with next() (what arrived since the last call) or collect() (everything,
// once the stream ended), each with a timeout. cancel() asks the scheduler to
// stop the sequence; the stream then ends with reason cancelled.
//
// Threading: all methods are thread-safe; the sink side never blocks.

#include "actors/session.hpp"

#include <caf/actor.hpp>

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

namespace kvlane::actors {

class token_stream final : public stream_sink {
public:
  token_stream(seq_id id, std::string model, caf::actor scheduler);

  struct chunk {
    std::vector<token_id> tokens;
    std::optional<stream_end> end; ///< set once, on the chunk that ends the stream
  };

  seq_id id() const noexcept { return id_; }
  const std::string& model() const noexcept { return model_; }

  /// Tokens that arrived since the last call, waiting up to `timeout` for at
  /// least one token or the end. nullopt on timeout or after the end was taken.
  std::optional<chunk> next(std::chrono::milliseconds timeout);

  /// Waits up to `timeout` for the end; returns every token not yet taken and
  /// the end, or nullopt on timeout.
  std::optional<chunk> collect(std::chrono::milliseconds timeout);

  bool ended() const;

  /// Asks the scheduler to cancel; idempotent, returns at once.
  void cancel();

  // stream_sink
  void on_tokens(std::span<const token_id> tokens) override;
  void on_end(const stream_end& end) override;

private:
  const seq_id id_;
  const std::string model_;
  caf::actor scheduler_;
  mutable std::mutex mutex_;
  std::condition_variable cv_;
  std::vector<token_id> pending_;
  std::optional<stream_end> end_;
  bool end_taken_ = false;
};

} // namespace kvlane::actors
