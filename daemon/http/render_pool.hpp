#pragma once

// kvlane::daemon::http::render_pool — the threads that decode request bodies
// and render and tokenize prompts.
//
// Problem it solves: decoding a body, rendering a chat template and
// tokenizing a prompt cost time in proportion to their size (seconds for
// megabytes through a BPE tokenizer). On the single HTTP thread one large
// prompt would stall every connection. Generations hand that work to this
// pool and get the result posted back to the HTTP thread.
//
// Two rules keep it fair and bounded:
//  - Small jobs never wait behind large ones: worker 0 takes only jobs below
//    `small_job_bytes`; the other workers take any job, oldest first. Large
//    jobs therefore run at most `threads - 1` at a time.
//  - Memory is bounded: at most `max_queued` jobs and `max_queued_bytes` of
//    input wait at once; try_submit() refuses more (the caller answers 503).
//    Running jobs add at most `threads` inputs.
//
// Threading: try_submit() and queued() from any thread. The destructor stops
// taking jobs, destroys those still queued unrun (on its own thread), then
// joins the workers after their current job.

#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace kvlane::daemon::http {

struct render_pool_limits {
  std::uint32_t threads = 2;                    ///< at least 2: one is kept for small jobs
  std::size_t max_queued = 64;                  ///< jobs waiting
  std::size_t max_queued_bytes = 64u << 20;     ///< input bytes waiting
  std::size_t small_job_bytes = 64u << 10;      ///< below this a job is small
};

/// The default sizing: one worker per core, 2 to 4.
render_pool_limits default_render_limits();

class render_pool {
public:
  explicit render_pool(render_pool_limits limits);
  ~render_pool();
  render_pool(const render_pool&) = delete;
  render_pool& operator=(const render_pool&) = delete;

  /// Queues `job`, whose input is `bytes` large. False (and `job` is
  /// destroyed unrun) when the queue is full.
  bool try_submit(std::size_t bytes, std::function<void()> job);

  const render_pool_limits& limits() const noexcept { return limits_; }
  /// Jobs waiting now (not running).
  std::size_t queued() const;

private:
  struct queued_job {
    std::size_t bytes = 0;
    std::function<void()> run;
  };

  void work(std::uint32_t index);
  /// The job worker `index` may take next, or end().
  std::deque<queued_job>::iterator next_for(std::uint32_t index);

  const render_pool_limits limits_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<queued_job> queue_;
  std::size_t queued_bytes_ = 0;
  bool stopping_ = false;
  std::vector<std::thread> threads_;
};

} // namespace kvlane::daemon::http
