#include "actors/disk_lane.hpp"

#include "common/logging.hpp"

#include <fmt/format.h>

#include <algorithm>

namespace kvlane::actors {

namespace {

using clock = std::chrono::steady_clock;

// Up to this much goes at once before the bandwidth bound applies.
constexpr std::uint64_t burst_bytes = 8ull << 20;

} // namespace

expected<std::shared_ptr<disk_lane>, std::string>
disk_lane::start(const store_disk_config& cfg, ipc::snapshot_store& store,
                 const std::vector<std::string>& models) {
  ipc::disk_open_report report;
  auto tier = ipc::disk_tier::open({cfg.dir, cfg.max_bytes}, report);
  if (!tier)
    return unexpected(std::move(tier).error());
  std::vector<ipc::disk_entry> listed;
  std::size_t unknown = 0;
  for (auto& e : (*tier)->entries()) {
    if (std::find(models.begin(), models.end(), e.label.model) != models.end()) {
      listed.push_back(std::move(e));
    } else {
      (*tier)->remove(e.id);
      ++unknown;
    }
  }
  store.add_disk_entries(std::move(listed));
  if (report.corrupt > 0)
    store.count_discard(ipc::discard_reason::disk_corrupt, report.corrupt);
  if (unknown > 0)
    store.count_discard(ipc::discard_reason::unknown_model, unknown);
  auto log = logging::get("store");
  log->info("disk tier in {}: {} snapshots ({} MiB of {} MiB) listed, write-back bounded to {} "
            "MiB/s",
            cfg.dir, (*tier)->count(), (*tier)->used_bytes() >> 20, cfg.max_bytes >> 20,
            cfg.write_bytes_per_s >> 20);
  if (report.corrupt + report.orphans + unknown > 0 || report.torn_bytes > 0)
    log->warn("disk tier: {} listed files missing or of the wrong size, {} unlisted files (writes "
              "cut short) and {} of models no longer configured deleted; {} bytes of torn journal "
              "cut{}{}",
              report.corrupt, report.orphans, unknown, report.torn_bytes,
              report.note.empty() ? "" : ": ", report.note);
  std::shared_ptr<disk_lane> lane(
    new disk_lane(std::move(*tier), store, cfg.write_bytes_per_s, std::move(report)));
  store.attach_disk(lane);
  lane->thread_ = std::thread([raw = lane.get()] { raw->run(); });
  return lane;
}

disk_lane::disk_lane(std::unique_ptr<ipc::disk_tier> tier, ipc::snapshot_store& store,
                     std::uint64_t bytes_per_second, ipc::disk_open_report opened)
  : tier_(std::move(tier)), store_(store), opened_(std::move(opened)),
    pacer_(bytes_per_second, burst_bytes) {}

disk_lane::~disk_lane() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  if (thread_.joinable())
    thread_.join();
}

void disk_lane::sealed(ipc::snapshot_handle h) {
  {
    std::lock_guard lock(mutex_);
    if (stopping_)
      return;
    queue_.push_back(job{true, h, 0});
  }
  wake_.notify_one();
}

void disk_lane::forget(std::uint64_t disk_id) {
  {
    std::lock_guard lock(mutex_);
    queue_.push_back(job{false, {}, disk_id});
  }
  wake_.notify_one();
}

expected<void, std::string> disk_lane::fetch(const ipc::disk_entry& expect,
                                             std::span<std::byte> into) {
  auto r = tier_->read(expect, into);
  if (r)
    tier_->touch(expect.id);
  return r;
}

void disk_lane::stop(std::chrono::milliseconds drain) {
  {
    std::unique_lock lock(mutex_);
    unpaced_ = true;
    wake_.notify_all();
    const bool drained = idle_.wait_for(lock, drain, [&] { return queue_.empty() && !busy_; });
    if (!drained)
      logging::get("store")->warn("disk tier: {} jobs still queued after {} ms; the snapshots "
                                  "not written yet are not kept on disk",
                                  queue_.size(), drain.count());
    stopping_ = true;
  }
  wake_.notify_all();
  if (thread_.joinable())
    thread_.join();
  // Once detached, no store call is under way or can come (the store calls
  // with its lock held, which attach_disk takes).
  store_.attach_disk(nullptr);
  std::deque<job> left;
  {
    std::lock_guard lock(mutex_);
    left.swap(queue_);
  }
  // Removals still queued: their files are deleted now (each one is a journal
  // record and an unlink); writes not done are dropped.
  for (const auto& j : left)
    if (!j.write)
      tier_->remove(j.disk_id);
  const auto f = figures();
  if (f.written > 0)
    logging::get("store")->info(
      "disk tier: {} snapshots written back ({} MiB in {:.2f} s, {:.0f} MiB/s), {} files ({} MiB) "
      "on disk",
      f.written, f.written_bytes >> 20, f.write_seconds,
      f.write_seconds > 0 ? static_cast<double>(f.written_bytes) / (1 << 20) / f.write_seconds : 0,
      tier_->count(), tier_->used_bytes() >> 20);
}

bool disk_lane::wait_idle(std::chrono::milliseconds timeout) {
  std::unique_lock lock(mutex_);
  return idle_.wait_for(lock, timeout, [&] { return queue_.empty() && !busy_; });
}

disk_lane_figures disk_lane::figures() const {
  std::lock_guard lock(mutex_);
  return figures_;
}

void disk_lane::run() {
  for (;;) {
    job next;
    {
      std::unique_lock lock(mutex_);
      busy_ = false;
      if (queue_.empty())
        idle_.notify_all();
      wake_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
      if (stopping_)
        return;
      next = queue_.front();
      queue_.pop_front();
      busy_ = true;
    }
    if (next.write) {
      write_one(next.handle);
    } else {
      tier_->remove(next.disk_id);
      std::lock_guard lock(mutex_);
      ++figures_.deleted;
    }
  }
}

// Sleeps as long as the bandwidth bound asks; false when the lane stops.
bool disk_lane::pace(std::size_t bytes) {
  const auto delay = pacer_.charge(bytes, clock::now().time_since_epoch());
  std::unique_lock lock(mutex_);
  if (delay > clock::duration::zero())
    wake_.wait_for(lock, delay, [&] { return stopping_ || unpaced_; });
  return !stopping_;
}

void disk_lane::write_one(ipc::snapshot_handle h) {
  auto wb = store_.begin_write_back(h);
  if (!wb)
    return; // freed or evicted before its turn, or on disk already
  const auto start = clock::now();
  wb->entry.id = tier_->next_id();
  const auto bytes = ipc::disk_tier::file_bytes(wb->entry);
  auto victims = tier_->victims_for(bytes);
  std::uint64_t evicted = 0;
  if (victims)
    for (const auto id : *victims)
      if (store_.disk_evicted(id)) {
        tier_->remove(id);
        ++evicted;
      }
  if (!victims || tier_->used_bytes() + bytes > tier_->max_bytes()) {
    (void)store_.end_write_back(h, std::nullopt); // larger than the tier, or held by loads
    std::lock_guard lock(mutex_);
    figures_.evicted += evicted;
    return;
  }
  auto r = tier_->write(wb->entry, wb->bytes, [this](std::size_t n) { return pace(n); });
  if (!r) {
    (void)store_.end_write_back(h, std::nullopt);
    std::lock_guard lock(mutex_);
    figures_.evicted += evicted;
    // A full or failing disk fails every write: the first and every 64th are logged.
    if (figures_.write_failures++ % 64 == 0 && !stopping_)
      logging::get("store")->warn("disk tier: writing snapshot {} failed ({} failures so far): {}",
                                  ipc::to_string(h), figures_.write_failures, r.error());
    return;
  }
  if (!store_.end_write_back(h, wb->entry.id))
    tier_->remove(wb->entry.id); // freed while it was written
  const double seconds = std::chrono::duration<double>(clock::now() - start).count();
  std::lock_guard lock(mutex_);
  figures_.evicted += evicted;
  ++figures_.written;
  figures_.written_bytes += wb->entry.length;
  figures_.write_seconds += seconds;
}

} // namespace kvlane::actors
