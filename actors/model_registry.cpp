#include "actors/model_registry.hpp"

#include "actors/model_instance.hpp"
#include "common/logging.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <condition_variable>
#include <future>
#include <mutex>
#include <thread>
#include <utility>

namespace kvlane::actors {

namespace detail {

using clock = model_registry::clock;

struct waiter {
  std::optional<keep_alive> keep;
  clock::time_point deadline;
  model_registry::acquire_callback done;
};

struct model_slot {
  std::string name;
  keep_alive configured = keep_alive::pinned();
  keep_alive keep = keep_alive::pinned(); ///< the last acquirer's
  residency state = residency::unloaded;
  std::shared_ptr<model_entry> entry;
  std::uint32_t users = 0;
  clock::time_point last_used{};
  std::optional<clock::time_point> expires_at; ///< loaded and idle, not pinned
  bool unload_requested = false;               ///< kvlane unload of a model in use
  std::string last_error;
  std::vector<waiter> waiters;
};

struct registry_core {
  model_registry::options opts;
  model_loader loader;
  mutable std::mutex mu;
  std::condition_variable changed; ///< the worker's and unload()'s wake-up
  std::vector<model_slot> slots;
  bool stopping = false;
  std::thread worker;

  // The idle clock starts: when the model unloads if nothing uses it again.
  void idle_from(model_slot& s, clock::time_point now) {
    s.last_used = now;
    if (s.unload_requested)
      s.expires_at = now;
    else if (s.keep.is_pinned())
      s.expires_at.reset();
    else
      s.expires_at = now + s.keep.idle();
  }

  void release(std::size_t index) {
    std::lock_guard lock{mu};
    auto& s = slots[index];
    if (s.users > 0 && --s.users == 0) {
      idle_from(s, clock::now());
      changed.notify_all();
    }
  }

  // Under the lock: a lease on loaded slot `index` for a requester with `k`.
  lease_ptr lease_locked(const std::shared_ptr<registry_core>& self, std::size_t index,
                         const std::optional<keep_alive>& k) {
    auto& s = slots[index];
    ++s.users;
    s.keep = k.value_or(s.configured);
    s.expires_at.reset();
    return std::make_shared<model_lease>(self, index, s.entry);
  }

  std::vector<resident_view> views() const {
    std::vector<resident_view> out;
    out.reserve(slots.size());
    for (const auto& s : slots)
      out.push_back({s.state, s.users, s.last_used, s.expires_at, s.keep.is_pinned()});
    return out;
  }
};

} // namespace detail

using detail::registry_core;
using detail::waiter;

model_lease::model_lease(std::shared_ptr<registry_core> core, std::size_t index,
                         std::shared_ptr<const model_entry> entry)
  : core_(std::move(core)), index_(index), entry_(std::move(entry)) {}

model_lease::~model_lease() {
  core_->release(index_);
}

model_registry::model_registry(std::vector<std::string> names, std::vector<keep_alive> defaults,
                               options opts, model_loader loader)
  : names_(std::move(names)), core_(std::make_shared<registry_core>()) {
  core_->opts = opts;
  core_->loader = std::move(loader);
  core_->slots.resize(names_.size());
  for (std::size_t i = 0; i < names_.size(); ++i) {
    core_->slots[i].name = names_[i];
    core_->slots[i].configured = core_->slots[i].keep = defaults.at(i);
  }
}

model_registry::~model_registry() {
  stop("the daemon is shutting down");
}

void model_registry::adopt(std::size_t index, std::shared_ptr<model_entry> entry) {
  std::lock_guard lock{core_->mu};
  auto& s = core_->slots.at(index);
  s.entry = std::move(entry);
  s.state = residency::loaded;
  core_->idle_from(s, clock::now());
}

void model_registry::start() {
  core_->worker = std::thread([this] { run(); });
}

std::vector<std::shared_ptr<const model_entry>> model_registry::stop(const std::string& why) {
  std::vector<acquire_callback> failed;
  {
    std::lock_guard lock{core_->mu};
    if (core_->stopping)
      return {};
    core_->stopping = true;
    for (auto& s : core_->slots) {
      for (auto& w : s.waiters)
        failed.push_back(std::move(w.done));
      s.waiters.clear();
    }
    core_->changed.notify_all();
  }
  if (core_->worker.joinable())
    core_->worker.join();
  for (auto& done : failed)
    done(unexpected(why));
  std::vector<std::shared_ptr<const model_entry>> out;
  std::lock_guard lock{core_->mu};
  for (auto& s : core_->slots)
    if (s.state == residency::loaded) {
      out.push_back(std::move(s.entry));
      s.state = residency::unloaded;
    }
  return out;
}

std::optional<std::size_t> model_registry::index_of(std::string_view name) const noexcept {
  const auto it = std::find(names_.begin(), names_.end(), name);
  if (it == names_.end())
    return std::nullopt;
  return static_cast<std::size_t>(it - names_.begin());
}

std::shared_ptr<const model_entry> model_registry::loaded(std::size_t index) const {
  std::lock_guard lock{core_->mu};
  const auto& s = core_->slots.at(index);
  return s.state == residency::loaded || s.state == residency::unloading ? s.entry : nullptr;
}

std::vector<std::shared_ptr<const model_entry>> model_registry::loaded_models() const {
  std::vector<std::shared_ptr<const model_entry>> out;
  std::lock_guard lock{core_->mu};
  for (const auto& s : core_->slots)
    if (s.state == residency::loaded || s.state == residency::unloading)
      out.push_back(s.entry);
  return out;
}

lease_ptr model_registry::try_acquire(std::size_t index, std::optional<keep_alive> keep) {
  std::lock_guard lock{core_->mu};
  if (core_->stopping || core_->slots.at(index).state != residency::loaded)
    return nullptr;
  return core_->lease_locked(core_, index, keep);
}

void model_registry::acquire(std::size_t index, std::optional<keep_alive> keep,
                             acquire_callback done) {
  acquired now = unexpected(std::string{});
  {
    std::lock_guard lock{core_->mu};
    auto& s = core_->slots.at(index);
    if (core_->stopping) {
      now = unexpected(fmt::format("model '{}' is not loaded and the daemon is shutting down", s.name));
    } else if (s.state == residency::loaded) {
      now = core_->lease_locked(core_, index, keep);
    } else {
      s.waiters.push_back({keep, clock::now() + core_->opts.load_timeout, std::move(done)});
      core_->changed.notify_all();
      return;
    }
  }
  done(std::move(now));
}

model_registry::acquired model_registry::acquire_wait(std::size_t index,
                                                      std::optional<keep_alive> keep) {
  auto answer = std::make_shared<std::promise<acquired>>();
  auto f = answer->get_future();
  acquire(index, keep, [answer](acquired a) { answer->set_value(std::move(a)); });
  if (f.wait_for(core_->opts.load_timeout + std::chrono::seconds(5)) != std::future_status::ready)
    return unexpected(fmt::format("model '{}' did not load within {} ms", names_.at(index),
                                  core_->opts.load_timeout.count()));
  return f.get();
}

expected<std::string, std::string> model_registry::unload(std::size_t index) {
  std::unique_lock lock{core_->mu};
  auto& s = core_->slots.at(index);
  switch (s.state) {
    case residency::unloaded: return fmt::format("model '{}' is not loaded", s.name);
    case residency::loading:
      return unexpected(fmt::format("model '{}' is loading; unload it once it has loaded", s.name));
    case residency::unloading:
    case residency::loaded: break;
  }
  s.unload_requested = true;
  if (s.users > 0)
    return fmt::format("model '{}' unloads when its {} running request(s) end", s.name, s.users);
  if (s.state == residency::loaded)
    s.expires_at = clock::now();
  core_->changed.notify_all();
  const bool done = core_->changed.wait_for(lock, std::chrono::seconds(60), [&] {
    return s.state == residency::unloaded || s.state == residency::loading || core_->stopping;
  });
  if (!done)
    return unexpected(fmt::format("model '{}' did not unload within 60 s", s.name));
  return fmt::format("model '{}' unloaded", s.name);
}

std::vector<model_status> model_registry::statuses() const {
  const auto now = clock::now();
  const auto wall = std::chrono::system_clock::now();
  const auto at = [&](clock::time_point t) {
    return wall + std::chrono::duration_cast<std::chrono::system_clock::duration>(t - now);
  };
  std::vector<model_status> out;
  std::lock_guard lock{core_->mu};
  for (const auto& s : core_->slots) {
    model_status m;
    m.name = s.name;
    m.state = s.state;
    m.users = s.users;
    m.waiting = static_cast<std::uint32_t>(s.waiters.size());
    m.keep = s.keep;
    m.last_error = s.last_error;
    if (s.state == residency::loaded || s.state == residency::unloading)
      m.entry = s.entry;
    if (s.state == residency::loaded) {
      if (s.users == 0 && s.expires_at)
        m.expires_at = at(*s.expires_at);
      else if (s.users > 0 && !s.keep.is_pinned())
        m.expires_at = at(now + s.keep.idle());
    }
    out.push_back(std::move(m));
  }
  return out;
}

void model_registry::run() {
  auto& core = *core_;
  auto log = logging::get("backend");
  std::unique_lock lock{core.mu};
  // Runs `fn` without the lock.
  const auto unlocked = [&](auto&& fn) {
    lock.unlock();
    fn();
    lock.lock();
  };
  const auto unload = [&](std::size_t i, std::string_view why) {
    auto& s = core.slots[i];
    s.state = residency::unloading;
    auto entry = s.entry;
    log->info("model '{}': unloading ({})", s.name, why);
    unlocked([&] { core.loader.unload(*entry); });
    s.state = residency::unloaded;
    auto last = std::move(s.entry);
    s.expires_at.reset();
    s.unload_requested = false;
    log->info("model '{}' unloaded", s.name);
    core.changed.notify_all();
    unlocked([&] { // the backend's teardown (if this held its last reference), without the lock
      last.reset();
      entry.reset();
    });
  };
  while (!core.stopping) {
    const auto now = clock::now();
    // Requests that waited too long fail, naming what they waited for.
    std::vector<std::pair<acquire_callback, std::string>> late;
    for (auto& s : core.slots)
      std::erase_if(s.waiters, [&](waiter& w) {
        if (w.deadline > now)
          return false;
        late.emplace_back(std::move(w.done),
                          fmt::format("model '{}' did not load within {} ms ({})", s.name,
                                      core.opts.load_timeout.count(),
                                      s.state == residency::unloaded
                                        ? "waiting for room: every loaded model is in use"
                                        : to_string(s.state)));
        return true;
      });
    if (!late.empty()) {
      unlocked([&] {
        for (auto& [done, why] : late)
          done(unexpected(std::move(why)));
      });
      continue;
    }
    const auto views = core.views();
    if (const auto expired = expired_models(views, now); !expired.empty()) {
      const auto& s = core.slots[expired.front()];
      unload(expired.front(), s.unload_requested ? "kvlane unload"
                              : s.keep.idle().count() == 0
                                ? "keep_alive 0"
                                : fmt::format("idle for its keep_alive {}", to_string(s.keep)));
      continue;
    }
    // The model whose first waiter came first loads next.
    std::optional<std::size_t> wanted;
    for (std::size_t i = 0; i < core.slots.size(); ++i) {
      const auto& s = core.slots[i];
      if (s.state == residency::unloaded && !s.waiters.empty()
          && (!wanted || s.waiters.front().deadline < core.slots[*wanted].waiters.front().deadline))
        wanted = i;
    }
    if (wanted) {
      const auto room = make_room(views, *wanted, core.opts.max_loaded);
      if (room.what == room_decision::verdict::unload) {
        unload(room.victim,
               fmt::format("least recently used idle model, to make room for '{}' "
                           "([models] max_loaded = {})",
                           core.slots[*wanted].name, core.opts.max_loaded));
        continue;
      }
      if (room.what == room_decision::verdict::fits) {
        auto& s = core.slots[*wanted];
        s.state = residency::loading;
        log->info("model '{}': loading ({} request(s) waiting)", s.name, s.waiters.size());
        expected<std::shared_ptr<model_entry>, std::string> loaded = unexpected(std::string{});
        unlocked([&] { loaded = core.loader.load(*wanted); });
        auto waiting = std::move(s.waiters);
        s.waiters.clear();
        std::vector<std::pair<acquire_callback, acquired>> answers;
        if (!loaded) {
          s.state = residency::unloaded;
          s.last_error = loaded.error();
          log->error("model '{}' failed to load: {}", s.name, loaded.error());
          for (auto& w : waiting)
            answers.emplace_back(std::move(w.done), unexpected(loaded.error()));
        } else {
          s.state = residency::loaded;
          s.entry = std::move(*loaded);
          s.last_error.clear();
          s.unload_requested = false;
          core.idle_from(s, clock::now());
          for (auto& w : waiting)
            answers.emplace_back(std::move(w.done), core.lease_locked(core_, *wanted, w.keep));
        }
        core.changed.notify_all();
        unlocked([&] {
          for (auto& [done, a] : answers)
            done(std::move(a));
          answers.clear(); // leases the callbacks did not keep go now, without the lock
        });
        continue;
      }
    }
    // Nothing to do now: sleep until an expiry or a waiter's deadline, or a change.
    std::optional<clock::time_point> wake = next_expiry(views, now);
    for (const auto& s : core.slots)
      for (const auto& w : s.waiters)
        if (!wake || w.deadline < *wake)
          wake = w.deadline;
    if (wake)
      core.changed.wait_until(lock, *wake);
    else
      core.changed.wait(lock);
  }
}

} // namespace kvlane::actors
