#pragma once

// kvlane::actors::disk_lane — the I/O thread of the snapshot store's disk tier.
//
// Problem it solves: retained KV must reach disk (ipc::disk_tier) without an
// actor thread ever waiting on a disk. The store tells the lane when a
// retained snapshot is sealed and when one with a disk copy is freed
// (ipc::disk_backing); the lane queues that and does it on a thread of its
// own: copy the sealed bytes out (pinned meanwhile) into a file at a bounded
// bandwidth (ipc::write_pacer), drop the least recently used files when
// [store.disk] max_bytes would be exceeded, delete the files of freed
// snapshots. Reading a file back (fetch) runs on the caller's thread: the
// transfer lane that loads the snapshot.
//
// Lifetime: start() opens the tier, hands its entries to the store (pending
// until the models claim them) and attaches the lane to the store; stop()
// (the engine's shutdown) finishes the queued writes unpaced within a bound,
// stops the thread and detaches the lane. The store must outlive stop().
//
// Threading: sealed(), forget() and fetch() are thread-safe; stop() is
// called once, from one thread.

#include "actors/engine_config.hpp"
#include "ipc/disk_tier.hpp"
#include "ipc/snapshot_store.hpp"
#include "ipc/write_pacer.hpp"

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace kvlane::actors {

/// What the lane did since it started.
struct disk_lane_figures {
  std::uint64_t written = 0;        ///< snapshots written back
  std::uint64_t written_bytes = 0;  ///< their KV bytes
  double write_seconds = 0;         ///< time spent writing them (pacing included)
  std::uint64_t write_failures = 0; ///< writes that failed (the snapshot stays in memory only)
  std::uint64_t evicted = 0;        ///< files dropped for max_bytes
  std::uint64_t deleted = 0;        ///< files deleted because their snapshot was freed
};

class disk_lane final : public ipc::disk_backing {
public:
  /// Opens the tier in `cfg.dir`, lists its entries of the configured
  /// `models` into `store` (pending until each model claims them when it
  /// loads; the files of other models are deleted: unknown_model) and
  /// attaches the lane to it.
  static expected<std::shared_ptr<disk_lane>, std::string>
  start(const store_disk_config& cfg, ipc::snapshot_store& store,
        const std::vector<std::string>& models);

  ~disk_lane() override;
  disk_lane(const disk_lane&) = delete;
  disk_lane& operator=(const disk_lane&) = delete;

  void sealed(ipc::snapshot_handle h) override;
  void forget(std::uint64_t disk_id) override;
  expected<void, std::string> fetch(const ipc::disk_entry& expect,
                                    std::span<std::byte> into) override;

  /// Waits until nothing is queued or being done; false after `timeout`.
  bool wait_idle(std::chrono::milliseconds timeout);

  /// Writes what is queued without pacing, for at most `drain`, then stops
  /// the thread (a write still going is abandoned: its file is not listed)
  /// and detaches the lane from the store.
  void stop(std::chrono::milliseconds drain);

  disk_lane_figures figures() const;
  const ipc::disk_open_report& opened() const noexcept { return opened_; }
  const ipc::disk_tier& tier() const noexcept { return *tier_; }

private:
  struct job {
    bool write = true;
    ipc::snapshot_handle handle;
    std::uint64_t disk_id = 0;
  };

  disk_lane(std::unique_ptr<ipc::disk_tier> tier, ipc::snapshot_store& store,
            std::uint64_t bytes_per_second, ipc::disk_open_report opened);
  void run();
  void write_one(ipc::snapshot_handle h);
  bool pace(std::size_t bytes);

  std::unique_ptr<ipc::disk_tier> tier_;
  ipc::snapshot_store& store_;
  ipc::disk_open_report opened_;
  mutable std::mutex mutex_;
  std::condition_variable wake_;
  std::condition_variable idle_;
  std::deque<job> queue_;
  bool busy_ = false;     // a job is being done
  bool unpaced_ = false;  // draining at stop: no bandwidth bound
  bool stopping_ = false; // abandon what is left
  ipc::write_pacer pacer_; // used by the lane's thread only
  disk_lane_figures figures_;
  std::thread thread_;
};

} // namespace kvlane::actors
