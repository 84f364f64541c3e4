#include "actors/device_gate.hpp"

#include <doctest/doctest.h>

#include <algorithm>
#include <atomic>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

using namespace kvlane::actors;

namespace {

/// Spins (yielding) until `gate` has `n` callers waiting: they are queued in
/// the order the test started them. The gate's own count is the event; a gate
/// that never queues them fails the test after 10 s instead of hanging it.
void wait_until_waiting(const device_gate& gate, std::uint64_t n) {
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (gate.waiting() != n) {
    REQUIRE_MESSAGE(std::chrono::steady_clock::now() < give_up,
                    "the gate never had " << n << " callers waiting (has " << gate.waiting() << ")");
    std::this_thread::yield();
  }
}

} // namespace

TEST_CASE("device_gate: one holder at a time across many threads") {
  device_gate sut;
  constexpr int threads = 4;
  constexpr int calls = 500;
  std::atomic<int> inside{0};
  std::atomic<int> most_inside{0};
  std::atomic<int> total{0};
  std::vector<gate_account> accounts(threads);
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t)
    pool.emplace_back([&, t] {
      for (int i = 0; i < calls; ++i) {
        const auto turn = sut.enter(accounts[t]);
        const int now = inside.fetch_add(1) + 1;
        int seen = most_inside.load();
        while (now > seen && !most_inside.compare_exchange_weak(seen, now)) {
        }
        // Long enough inside for another thread to try its luck meanwhile.
        for (int k = 0; k < 3; ++k)
          std::this_thread::yield();
        total.fetch_add(1);
        inside.fetch_sub(1);
      }
    });
  for (auto& t : pool)
    t.join();
  CHECK(most_inside.load() == 1);
  CHECK(total.load() == threads * calls);
  for (auto& a : accounts)
    CHECK(a.passes.load() == calls);
  CHECK_FALSE(sut.held());
  CHECK(sut.waiting() == 0);
}

TEST_CASE("device_gate: waiters pass in the order they arrived") {
  device_gate sut;
  gate_account holder;
  std::vector<gate_account> accounts(3);
  std::mutex order_mutex;
  std::vector<int> order;
  std::vector<std::thread> waiters;
  std::optional<device_gate::pass> held{sut.enter(holder)};
  CHECK(sut.held());
  // Started one after another, each only once the previous one is queued.
  for (int i : {0, 1, 2}) {
    waiters.emplace_back([&, i] {
      const auto turn = sut.enter(accounts[i]);
      std::lock_guard lock{order_mutex};
      order.push_back(i);
    });
    wait_until_waiting(sut, static_cast<std::uint64_t>(i) + 1);
  }
  held.reset();
  for (auto& t : waiters)
    t.join();
  CHECK(order == std::vector<int>{0, 1, 2});
  CHECK(holder.waits.load() == 0);
  for (auto& a : accounts) {
    CHECK(a.passes.load() == 1);
    CHECK(a.waits.load() == 1);
    CHECK(a.wait_ns.load() > 0);
  }
}

TEST_CASE("device_gate: a free gate costs no wait; a taken one counts the wait in the caller's "
          "account only") {
  device_gate sut;
  gate_account mine, theirs;
  {
    const auto turn = sut.enter(mine);
    CHECK(turn.waited().count() == 0);
  }
  {
    const auto again = sut.enter(mine);
    CHECK(again.waited().count() == 0);
  }
  CHECK(mine.passes.load() == 2);
  CHECK(mine.waits.load() == 0);
  CHECK(mine.wait_ns.load() == 0);

  std::optional<device_gate::pass> held{sut.enter(mine)};
  std::chrono::nanoseconds waited{0};
  std::thread other([&] {
    const auto turn = sut.enter(theirs);
    waited = turn.waited();
  });
  wait_until_waiting(sut, 1);
  held.reset();
  other.join();
  CHECK(waited.count() > 0);
  CHECK(theirs.waits.load() == 1);
  CHECK(theirs.wait_ns.load() == static_cast<std::uint64_t>(waited.count()));
  CHECK(theirs.wait_seconds() > 0);
  CHECK(mine.passes.load() == 3);
  CHECK(mine.waits.load() == 0);
}

TEST_CASE("device_gate: a pass moved out of its scope keeps the gate until it ends") {
  device_gate sut;
  gate_account a;
  auto take = [&] { return sut.enter(a); };
  {
    auto outer = take();
    CHECK(sut.held());
    auto moved = std::move(outer);
    CHECK(sut.held());
  }
  CHECK_FALSE(sut.held());
}

TEST_CASE("device_gate: an exception thrown while holding releases the gate") {
  device_gate sut;
  gate_account a;
  try {
    const auto turn = sut.enter(a);
    throw std::runtime_error("driver bug");
  } catch (const std::runtime_error&) {
  }
  CHECK_FALSE(sut.held());
}

TEST_CASE("device_registry: one device per name while held; a fresh one after its last holder") {
  device_registry sut;
  auto a = sut.get("sim");
  auto b = sut.get("sim");
  auto c = sut.get("aries:0");
  CHECK(a == b);
  CHECK(a != c);
  CHECK(a->name == "sim");
  CHECK(c->name == "aries:0");
  CHECK(sut.in_use() == std::vector<std::string>{"aries:0", "sim"});

  // One model unloading leaves the other's gates as they are.
  gate_account acc;
  std::weak_ptr<shared_device> watch = a;
  const auto turn = b->compute.enter(acc);
  a.reset();
  CHECK_FALSE(watch.expired());
  CHECK(sut.get("sim") == b);
  CHECK(b->compute.held());

  c.reset();
  CHECK(sut.in_use() == std::vector<std::string>{"sim"});
}

TEST_CASE("device_registry: a device nobody holds is made anew") {
  device_registry sut;
  std::weak_ptr<shared_device> first = sut.get("cpu");
  CHECK(first.expired()); // the caller dropped it at once
  auto second = sut.get("cpu");
  CHECK(second->name == "cpu");
  CHECK(sut.in_use() == std::vector<std::string>{"cpu"});
}
