#include "actors/lane.hpp"

#include "actors/exception_handler.hpp"
#include "common/logging.hpp"

#include <caf/actor_system.hpp>
#include <caf/stateful_actor.hpp>
#include <caf/typed_event_based_actor.hpp>

namespace kvlane::actors {

namespace {

using clock = std::chrono::steady_clock;

struct lane_state {
  static inline const char* name = "lane";
  std::string lane_name;
  std::shared_ptr<backends::backend> backend;
  std::shared_ptr<ipc::snapshot_store> store;
  std::shared_ptr<lane_heartbeat> heartbeat;
  std::shared_ptr<device_gate> gate;
};

// Marks the lane busy for the lifetime of one backend call.
class busy_mark {
public:
  explicit busy_mark(lane_heartbeat& h) : h_(h) {
    h_.busy_since_ns.store(clock::now().time_since_epoch().count(), std::memory_order_relaxed);
  }
  ~busy_mark() { h_.busy_since_ns.store(0, std::memory_order_relaxed); }
  busy_mark(const busy_mark&) = delete;
  busy_mark& operator=(const busy_mark&) = delete;

private:
  lane_heartbeat& h_;
};

using lane_impl = lane_actor::stateful_pointer<lane_state>;

transfer_done_ptr run_dump(lane_state& st, const transfer_job_ptr& job) {
  auto done = std::make_shared<transfer_done>();
  done->job = *job;
  done->start = clock::now();
  // Pages not in the store's warm pool are faulted in here, on the lane, not
  // inside the device copy. If that fails the dump faults them in itself; a
  // stale handle is reported by seal() below.
  if (auto c = st.store->commit(job->snapshot); !c && c.error().code == ipc::store_errc::system)
    logging::get("store")->warn("committing snapshot {} before its dump failed: {}",
                                ipc::to_string(job->snapshot), c.error().message);
  auto r = st.backend->dump(job->slot, job->cache_len, job->destination);
  if (!r) {
    done->error = fmt::format("dump of slot {} failed: {} ({})", job->slot, r.error().message,
                              backends::to_string(r.error().code));
  } else if (auto s = st.store->seal(job->snapshot); !s) {
    done->error = fmt::format("sealing snapshot {} failed: {}", ipc::to_string(job->snapshot),
                              s.error().message);
  }
  done->end = clock::now();
  return done;
}

transfer_done_ptr run_load(lane_state& st, const transfer_job_ptr& job) {
  auto done = std::make_shared<transfer_done>();
  done->job = *job;
  done->start = clock::now();
  // The slot is trusted only after the snapshot proves intact and current.
  if (auto v = st.store->verify(job->snapshot, job->generation); !v) {
    // No room to read a snapshot back from the disk tier is not damage: it
    // stays there for a later turn, this one recomputes.
    done->corrupt = v.error().code != ipc::store_errc::full
                    && v.error().code != ipc::store_errc::too_large;
    done->error = fmt::format("snapshot {} failed verification: {}",
                              ipc::to_string(job->snapshot), v.error().message);
  } else if (auto bytes = st.store->read(job->snapshot); !bytes) {
    done->corrupt = true;
    done->error = fmt::format("snapshot {} unreadable: {}", ipc::to_string(job->snapshot),
                              bytes.error().message);
  } else if (auto r = st.backend->load(job->slot, job->cache_len, *bytes); !r) {
    done->error = fmt::format("load of slot {} failed: {} ({})", job->slot, r.error().message,
                              backends::to_string(r.error().code));
  }
  done->end = clock::now();
  return done;
}

lane_actor::behavior_type lane_behavior(lane_impl self, std::string name,
                                        std::shared_ptr<backends::backend> backend,
                                        std::shared_ptr<ipc::snapshot_store> store,
                                        std::shared_ptr<lane_heartbeat> heartbeat,
                                        std::shared_ptr<device_gate> gate) {
  self->state.lane_name = std::move(name);
  self->state.backend = std::move(backend);
  self->state.store = std::move(store);
  self->state.heartbeat = std::move(heartbeat);
  self->state.gate = std::move(gate);
  self->set_exception_handler(
    log_and_stop("scheduler", spdlog::level::critical, "lane " + self->state.lane_name));
  return {
    // The device gate is held for the whole call (a transfer's store work
    // included) and released before the reply goes out; the call's start,
    // and its busy mark, come after the wait.
    [self](step_atom, step_plan_ptr plan) -> step_done_ptr {
      const auto turn = self->state.gate->enter(self->state.heartbeat->device_wait);
      busy_mark busy{*self->state.heartbeat};
      auto done = std::make_shared<step_done>();
      done->start = clock::now();
      auto r = self->state.backend->step(plan->rows, done->out);
      done->end = clock::now();
      if (!r)
        done->error = std::move(r.error());
      done->plan = std::move(plan);
      return done;
    },
    [self](transfer_atom, transfer_job_ptr job) -> transfer_done_ptr {
      const auto turn = self->state.gate->enter(self->state.heartbeat->device_wait);
      busy_mark busy{*self->state.heartbeat};
      return job->kind == transfer_kind::dump ? run_dump(self->state, job)
                                              : run_load(self->state, job);
    },
  };
}

} // namespace

lane_actor spawn_lane(caf::actor_system& sys, std::string name,
                      std::shared_ptr<backends::backend> backend,
                      std::shared_ptr<ipc::snapshot_store> store,
                      std::shared_ptr<lane_heartbeat> heartbeat,
                      std::shared_ptr<device_gate> gate) {
  return sys.spawn<caf::detached>(lane_behavior, std::move(name), std::move(backend),
                                  std::move(store), std::move(heartbeat), std::move(gate));
}

} // namespace kvlane::actors
