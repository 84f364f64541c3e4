#include "actors/transfer_tracker.hpp"

#include <algorithm>

namespace kvlane::actors {

void transfer_tracker::started(const transfer_job& job) noexcept {
  ++(lane_ == transfer_lane::compute ? on_compute_ : on_transfer_);
  ++(job.kind == transfer_kind::dump ? dumps_of(job) : loads_);
  (job.kind == transfer_kind::dump ? dump_bytes_ : load_bytes_) += job.bytes;
}

void transfer_tracker::finished(const transfer_job& job) noexcept {
  --(lane_ == transfer_lane::compute ? on_compute_ : on_transfer_);
  --(job.kind == transfer_kind::dump ? dumps_of(job) : loads_);
  auto& queued = job.kind == transfer_kind::dump ? dump_bytes_ : load_bytes_;
  queued -= std::min(queued, job.bytes);
}

} // namespace kvlane::actors
