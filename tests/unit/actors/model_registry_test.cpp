#include "actors/model_instance.hpp"
#include "actors/model_registry.hpp"

#include <doctest/doctest.h>

#include <condition_variable>
#include <future>
#include <mutex>
#include <thread>

using namespace kvlane::actors;
using namespace std::chrono_literals;

namespace {

/// A loader whose loads block until the test opens the gate, and that records what it did.
struct fake_loader {
  std::mutex mu;
  std::condition_variable cv;
  bool open = true;
  std::vector<std::string> events; ///< "load a", "unload b", ...
  std::optional<std::string> fail; ///< the next load fails with this
  std::vector<std::string> names;

  model_loader make() {
    model_loader l;
    l.load = [this](std::size_t i) -> kvlane::expected<std::shared_ptr<model_entry>, std::string> {
      std::unique_lock lock{mu};
      cv.wait(lock, [&] { return open; });
      events.push_back("load " + names[i]);
      if (fail) {
        auto why = std::move(*fail);
        fail.reset();
        return kvlane::unexpected(std::move(why));
      }
      auto e = std::make_shared<model_entry>();
      e->name = names[i];
      e->index = static_cast<std::uint32_t>(i);
      return e;
    };
    l.unload = [this](const model_entry& m) {
      std::lock_guard lock{mu};
      events.push_back("unload " + m.name);
    };
    return l;
  }
  void set_open(bool o) {
    std::lock_guard lock{mu};
    open = o;
    cv.notify_all();
  }
  std::vector<std::string> seen() {
    std::lock_guard lock{mu};
    return events;
  }
};

struct registry_fixture {
  fake_loader loader;
  std::unique_ptr<model_registry> sut;

  explicit registry_fixture(std::uint32_t max_loaded, keep_alive keep = keep_alive::after(5min),
                            std::chrono::milliseconds timeout = 10s) {
    loader.names = {"a", "b", "c"};
    sut = std::make_unique<model_registry>(loader.names, std::vector<keep_alive>(3, keep),
                                           model_registry::options{max_loaded, timeout},
                                           loader.make());
    sut->start();
  }
  ~registry_fixture() { sut->stop("test over"); }

  model_status status(std::size_t i) { return sut->statuses().at(i); }

  /// Polls until `pred` holds or 10 s pass.
  template <class F>
  bool eventually(F pred) {
    const auto deadline = std::chrono::steady_clock::now() + 10s;
    while (std::chrono::steady_clock::now() < deadline) {
      if (pred())
        return true;
      std::this_thread::sleep_for(1ms);
    }
    return false;
  }
};

} // namespace

TEST_CASE("model_registry: requests for a loading model wait, shown as loading, and all get it") {
  registry_fixture f{0};
  f.loader.set_open(false);
  std::vector<std::future<model_registry::acquired>> answers;
  for (int i = 0; i < 3; ++i) {
    auto p = std::make_shared<std::promise<model_registry::acquired>>();
    answers.push_back(p->get_future());
    f.sut->acquire(0, std::nullopt, [p](model_registry::acquired a) { p->set_value(std::move(a)); });
  }
  REQUIRE(f.eventually([&] { return f.status(0).state == residency::loading; }));
  CHECK(f.status(0).waiting == 3);
  CHECK(answers[0].wait_for(0ms) == std::future_status::timeout);
  f.loader.set_open(true);
  std::vector<lease_ptr> leases;
  for (auto& a : answers) {
    auto got = a.get();
    REQUIRE(got);
    CHECK((*got)->model().name == "a");
    leases.push_back(*got);
  }
  CHECK(f.status(0).state == residency::loaded);
  CHECK(f.status(0).users == 3);
  CHECK(f.loader.seen() == std::vector<std::string>{"load a"}); // one load for all three
}

TEST_CASE("model_registry: a failed load fails every waiting request with the model and the cause") {
  registry_fixture f{0};
  f.loader.set_open(false);
  f.loader.fail = "model 'a': backend 'sim' failed to load: no device";
  std::vector<std::future<model_registry::acquired>> answers;
  for (int i = 0; i < 2; ++i) {
    auto p = std::make_shared<std::promise<model_registry::acquired>>();
    answers.push_back(p->get_future());
    f.sut->acquire(0, std::nullopt, [p](model_registry::acquired a) { p->set_value(std::move(a)); });
  }
  REQUIRE(f.eventually([&] { return f.status(0).waiting == 2; }));
  f.loader.set_open(true);
  for (auto& a : answers) {
    auto got = a.get();
    REQUIRE_FALSE(got);
    CHECK(got.error().find("model 'a'") != std::string::npos);
    CHECK(got.error().find("no device") != std::string::npos);
  }
  CHECK(f.status(0).state == residency::unloaded);
  CHECK(f.status(0).last_error.find("no device") != std::string::npos);
  // The next request tries again.
  auto again = f.sut->acquire_wait(0, std::nullopt);
  REQUIRE(again);
  CHECK(f.status(0).last_error.empty());
}

TEST_CASE("model_registry: keep_alive 0 unloads the model when its last lease goes, not before") {
  registry_fixture f{0};
  auto first = f.sut->acquire_wait(0, keep_alive::after(0ms));
  auto second = f.sut->acquire_wait(0, keep_alive::after(0ms));
  REQUIRE(first);
  REQUIRE(second);
  first->reset();
  // Still in use by the second: loaded (no unload has happened).
  CHECK(f.status(0).state == residency::loaded);
  CHECK(f.loader.seen() == std::vector<std::string>{"load a"});
  second->reset();
  CHECK(f.eventually([&] { return f.status(0).state == residency::unloaded; }));
  CHECK(f.loader.seen() == std::vector<std::string>{"load a", "unload a"});
}

TEST_CASE("model_registry: max_loaded makes room from the least recently used idle model, and a "
          "load waits while every loaded model is in use") {
  registry_fixture f{2};
  REQUIRE(f.sut->acquire_wait(0, std::nullopt)); // a, then released
  auto b = f.sut->acquire_wait(1, std::nullopt);
  REQUIRE(b);
  REQUIRE(f.sut->acquire_wait(0, std::nullopt)); // a used again: b is in use anyway
  b->reset();                            // b idle now, and used after a
  REQUIRE(f.sut->acquire_wait(0, std::nullopt)); // a most recent
  auto c = f.sut->acquire_wait(2, std::nullopt);
  REQUIRE(c);
  CHECK(f.status(1).state == residency::unloaded); // b was the least recently used
  CHECK(f.status(0).state == residency::loaded);

  // a and c both in use: a load of b waits until one is idle.
  auto a = f.sut->acquire_wait(0, std::nullopt);
  REQUIRE(a);
  auto p = std::make_shared<std::promise<model_registry::acquired>>();
  auto answer = p->get_future();
  f.sut->acquire(1, std::nullopt, [p](model_registry::acquired x) { p->set_value(std::move(x)); });
  REQUIRE(f.eventually([&] { return f.status(1).waiting == 1; }));
  CHECK(answer.wait_for(50ms) == std::future_status::timeout);
  CHECK(f.status(0).state == residency::loaded);
  CHECK(f.status(2).state == residency::loaded);
  c->reset(); // c goes idle: it makes room
  auto got = answer.get();
  REQUIRE(got);
  CHECK(f.status(2).state == residency::unloaded);
  CHECK(f.status(0).state == residency::loaded);
}

TEST_CASE("model_registry: a request waiting for room past load_timeout fails saying why") {
  registry_fixture f{1, keep_alive::after(5min), 200ms};
  auto a = f.sut->acquire_wait(0, std::nullopt);
  REQUIRE(a);
  const auto b = f.sut->acquire_wait(1, std::nullopt);
  REQUIRE_FALSE(b);
  CHECK(b.error().find("model 'b' did not load within 200 ms") != std::string::npos);
  CHECK(b.error().find("every loaded model is in use") != std::string::npos);
  CHECK(f.status(0).state == residency::loaded); // the model in use stayed
}

TEST_CASE("model_registry: an idle model unloads after its keep_alive; kvlane unload waits for it") {
  registry_fixture f{0, keep_alive::after(20ms)};
  REQUIRE(f.sut->acquire_wait(0, std::nullopt));
  CHECK(f.eventually([&] { return f.status(0).state == residency::unloaded; }));
  REQUIRE(f.sut->acquire_wait(1, keep_alive::pinned()));
  CHECK(f.status(1).keep.is_pinned());
  CHECK_FALSE(f.status(1).expires_at.has_value());
  const auto r = f.sut->unload(1);
  REQUIRE(r);
  CHECK(*r == "model 'b' unloaded");
  CHECK(f.status(1).state == residency::unloaded);
  // A model in use unloads when its request ends.
  auto c = f.sut->acquire_wait(2, keep_alive::pinned());
  REQUIRE(c);
  const auto later = f.sut->unload(2);
  REQUIRE(later);
  CHECK(later->find("unloads when its 1 running request(s) end") != std::string::npos);
  CHECK(f.status(2).state == residency::loaded);
  c->reset();
  CHECK(f.eventually([&] { return f.status(2).state == residency::unloaded; }));
}

TEST_CASE("model_registry: stop fails the waiting requests and returns the loaded models") {
  registry_fixture f{1};
  auto a = f.sut->acquire_wait(0, std::nullopt);
  REQUIRE(a);
  auto p = std::make_shared<std::promise<model_registry::acquired>>();
  auto answer = p->get_future();
  f.sut->acquire(1, std::nullopt, [p](model_registry::acquired x) { p->set_value(std::move(x)); });
  REQUIRE(f.eventually([&] { return f.status(1).waiting == 1; }));
  const auto loaded = f.sut->stop("daemon shutting down");
  const auto got = answer.get();
  REQUIRE_FALSE(got);
  CHECK(got.error() == "daemon shutting down");
  REQUIRE(loaded.size() == 1);
  CHECK(loaded[0]->name == "a");
}
