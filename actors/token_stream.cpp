#include "actors/token_stream.hpp"

#include <caf/send.hpp>

namespace kvlane::actors {

token_stream::token_stream(seq_id id, std::string model, caf::actor scheduler)
  : id_(id), model_(std::move(model)), scheduler_(std::move(scheduler)) {}

std::optional<token_stream::chunk> token_stream::next(std::chrono::milliseconds timeout) {
  std::unique_lock lock{mutex_};
  if (!cv_.wait_for(lock, timeout, [&] { return !pending_.empty() || (end_ && !end_taken_); }))
    return std::nullopt;
  chunk c;
  c.tokens.swap(pending_);
  if (end_ && !end_taken_) {
    c.end = end_;
    end_taken_ = true;
  }
  return c;
}

std::optional<token_stream::chunk> token_stream::collect(std::chrono::milliseconds timeout) {
  std::unique_lock lock{mutex_};
  if (!cv_.wait_for(lock, timeout, [&] { return end_.has_value(); }) || end_taken_)
    return std::nullopt;
  chunk c;
  c.tokens.swap(pending_);
  c.end = end_;
  end_taken_ = true;
  return c;
}

bool token_stream::ended() const {
  std::lock_guard lock{mutex_};
  return end_.has_value();
}

void token_stream::cancel() {
  if (!ended())
    caf::anon_send(scheduler_, cancel_atom::value, id_);
}

void token_stream::on_tokens(std::span<const token_id> tokens) {
  {
    std::lock_guard lock{mutex_};
    pending_.insert(pending_.end(), tokens.begin(), tokens.end());
  }
  cv_.notify_all();
}

void token_stream::on_end(const stream_end& end) {
  {
    std::lock_guard lock{mutex_};
    end_ = end;
  }
  cv_.notify_all();
}

} // namespace kvlane::actors
