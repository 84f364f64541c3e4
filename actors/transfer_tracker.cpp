#include "actors/transfer_tracker.hpp"

namespace kvlane::actors {

void transfer_tracker::started(const transfer_job& job) noexcept {
  ++(lane_ == transfer_lane::compute ? on_compute_ : on_transfer_);
  ++(job.kind == transfer_kind::dump ? dumps_of(job) : loads_);
}

void transfer_tracker::finished(const transfer_job& job) noexcept {
  --(lane_ == transfer_lane::compute ? on_compute_ : on_transfer_);
  --(job.kind == transfer_kind::dump ? dumps_of(job) : loads_);
}

} // namespace kvlane::actors
