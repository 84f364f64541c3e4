#include "daemon/http/render_pool.hpp"

#include <doctest/doctest.h>

#include <atomic>
#include <chrono>
#include <future>
#include <memory>
#include <thread>

using namespace kvlane::daemon::http;
using namespace std::chrono_literals;

namespace {

render_pool_limits two_threads() {
  render_pool_limits l;
  l.threads = 2;
  l.max_queued = 4;
  l.max_queued_bytes = 1000;
  l.small_job_bytes = 100;
  return l;
}

/// A job that says it started, then waits until released.
struct blocking_job {
  std::promise<void> started;
  std::promise<void> release;
  std::shared_future<void> released = release.get_future().share();

  std::function<void()> fn() {
    return [this] {
      started.set_value();
      released.wait();
    };
  }
};

} // namespace

TEST_CASE("render_pool: a small job runs while a large one occupies the other worker and "
          "another large one waits") {
  render_pool sut{two_threads()};
  blocking_job large;
  auto large_started = large.started.get_future();
  REQUIRE(sut.try_submit(500, large.fn()));
  REQUIRE(large_started.wait_for(10s) == std::future_status::ready);

  std::promise<void> second_large_ran;
  auto second_large = second_large_ran.get_future();
  REQUIRE(sut.try_submit(500, [&] { second_large_ran.set_value(); }));

  std::promise<void> small_ran;
  auto small = small_ran.get_future();
  REQUIRE(sut.try_submit(10, [&] { small_ran.set_value(); }));
  CHECK(small.wait_for(10s) == std::future_status::ready);
  // Worker 0 never takes a large job: the second one waits for the first.
  CHECK(second_large.wait_for(0s) == std::future_status::timeout);
  CHECK(sut.queued() == 1);

  large.release.set_value();
  CHECK(second_large.wait_for(10s) == std::future_status::ready);
}

TEST_CASE("render_pool: jobs past max_queued or max_queued_bytes are refused, and room comes "
          "back as jobs run") {
  render_pool sut{two_threads()};
  blocking_job a, b;
  auto a_started = a.started.get_future();
  auto b_started = b.started.get_future();
  REQUIRE(sut.try_submit(10, a.fn()));
  REQUIRE(sut.try_submit(10, b.fn()));
  REQUIRE(a_started.wait_for(10s) == std::future_status::ready);
  REQUIRE(b_started.wait_for(10s) == std::future_status::ready);

  std::atomic<int> ran{0};
  const auto count = [&] { ++ran; };
  // Bytes: 600 + 300 fit in 1000, another 200 does not.
  CHECK(sut.try_submit(600, count));
  CHECK(sut.try_submit(300, count));
  CHECK_FALSE(sut.try_submit(200, count));
  // Count: 4 at most.
  CHECK(sut.try_submit(50, count));
  CHECK(sut.try_submit(50, count));
  CHECK_FALSE(sut.try_submit(1, count));
  CHECK(sut.queued() == 4);

  a.release.set_value();
  b.release.set_value();
  // The queue drains; then a job as large as the whole byte budget fits alone.
  std::promise<void> big_ran;
  auto big = big_ran.get_future();
  while (sut.queued() != 0)
    std::this_thread::yield();
  CHECK(sut.try_submit(5000, [&] { big_ran.set_value(); }));
  CHECK(big.wait_for(10s) == std::future_status::ready);
}

TEST_CASE("render_pool: the destructor destroys queued jobs unrun while the running ones "
          "finish") {
  bool queued_ran = false;
  blocking_job a, b;
  auto a_started = a.started.get_future();
  auto b_started = b.started.get_future();
  // The running jobs are released only when the queued job is destroyed: had it run, it
  // would have had to wait for them.
  struct releaser {
    blocking_job& a;
    blocking_job& b;
    ~releaser() {
      a.release.set_value();
      b.release.set_value();
    }
  };
  std::shared_ptr<releaser> guard{new releaser{a, b}};
  std::weak_ptr<releaser> watch = guard;
  {
    render_pool sut{two_threads()};
    REQUIRE(sut.try_submit(10, a.fn()));
    REQUIRE(sut.try_submit(10, b.fn()));
    REQUIRE(a_started.wait_for(10s) == std::future_status::ready);
    REQUIRE(b_started.wait_for(10s) == std::future_status::ready);
    REQUIRE(sut.try_submit(10, [&queued_ran, g = std::move(guard)] { queued_ran = true; }));
  }
  CHECK_FALSE(queued_ran);
  CHECK(watch.expired());
}
