#include "daemon/http/render_pool.hpp"

#include "common/logging.hpp"

#include <algorithm>
#include <exception>

namespace kvlane::daemon::http {

render_pool_limits default_render_limits() {
  render_pool_limits l;
  l.threads = std::clamp(std::thread::hardware_concurrency(), 2u, 4u);
  return l;
}

render_pool::render_pool(render_pool_limits limits) : limits_(limits) {
  const auto n = std::max(limits_.threads, 2u);
  threads_.reserve(n);
  for (std::uint32_t i = 0; i < n; ++i)
    threads_.emplace_back([this, i] { work(i); });
}

render_pool::~render_pool() {
  std::deque<queued_job> dropped;
  {
    std::lock_guard lock{mu_};
    stopping_ = true;
    dropped.swap(queue_);
    queued_bytes_ = 0;
  }
  cv_.notify_all();
  dropped.clear(); // unrun, on the owner's thread, outside the lock
  for (auto& t : threads_)
    t.join();
}

bool render_pool::try_submit(std::size_t bytes, std::function<void()> job) {
  {
    std::lock_guard lock{mu_};
    if (stopping_ || queue_.size() >= limits_.max_queued
        || (!queue_.empty() && queued_bytes_ + bytes > limits_.max_queued_bytes))
      return false;
    queued_bytes_ += bytes;
    queue_.push_back({bytes, std::move(job)});
  }
  // Every worker may be the only one allowed to take it (worker 0 for a
  // small job when the others are busy): wake them all; few are idle.
  cv_.notify_all();
  return true;
}

std::size_t render_pool::queued() const {
  std::lock_guard lock{mu_};
  return queue_.size();
}

std::deque<render_pool::queued_job>::iterator render_pool::next_for(std::uint32_t index) {
  if (index != 0)
    return queue_.begin();
  return std::find_if(queue_.begin(), queue_.end(),
                      [&](const queued_job& j) { return j.bytes < limits_.small_job_bytes; });
}

void render_pool::work(std::uint32_t index) {
  std::unique_lock lock{mu_};
  for (;;) {
    std::deque<queued_job>::iterator it;
    cv_.wait(lock, [&] { return stopping_ || (it = next_for(index)) != queue_.end(); });
    if (stopping_)
      return;
    auto job = std::move(*it);
    queue_.erase(it);
    queued_bytes_ -= job.bytes;
    lock.unlock();
    try {
      job.run();
    } catch (const std::exception& e) {
      // Jobs report their own failures; this is the last line, so a bug
      // costs one request, not the daemon.
      logging::get("http")->error("a render job failed: {}", e.what());
    } catch (...) {
      logging::get("http")->error("a render job failed");
    }
    job.run = nullptr; // what it captured goes before the lock is taken again
    lock.lock();
  }
}

} // namespace kvlane::daemon::http
