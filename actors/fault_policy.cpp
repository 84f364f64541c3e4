#include "actors/fault_policy.hpp"

#include <algorithm>

namespace kvlane::actors {

namespace {

bool erase_id(std::vector<seq_id>& ids, seq_id id) {
  const auto it = std::find(ids.begin(), ids.end(), id);
  if (it == ids.end())
    return false;
  ids.erase(it);
  return true;
}

} // namespace

std::string_view to_string(device_health h) noexcept {
  switch (h) {
    case device_health::healthy: return "healthy";
    case device_health::degraded: return "degraded";
    case device_health::failing: return "failing";
  }
  return "unknown";
}

next_step fault_policy::next(clock::time_point now) const {
  switch (phase_) {
    case phase::normal: break;
    case phase::retrying: return {next_step::kind::retry, retry_rows_, {}};
    case phase::isolating:
      if (!pending_.empty())
        return {next_step::kind::isolate, {pending_.front()}, {}};
      break;
    case phase::backing_off:
      if (now < until_)
        return {next_step::kind::wait, {}, until_};
      break; // the wait is over: the next step is the probe
  }
  return {};
}

fault_actions fault_policy::step_failed(std::span<const seq_id> rows, clock::time_point now) {
  fault_actions out;
  switch (phase_) {
    case phase::normal:
      health_ = device_health::degraded;
      if (knobs_.step_retries > 0) {
        phase_ = phase::retrying;
        retry_rows_.assign(rows.begin(), rows.end());
        retries_ = 1;
        ++counters_.step_retries;
      } else {
        start_isolation_or_backoff(rows, now, out);
      }
      break;
    case phase::retrying:
      if (retries_ < knobs_.step_retries) {
        retry_rows_.assign(rows.begin(), rows.end());
        ++retries_;
        ++counters_.step_retries;
      } else {
        start_isolation_or_backoff(rows, now, out);
      }
      break;
    case phase::isolating:
      // A row alone gets the retries a whole step gets, so that a transient
      // fault during isolation does not blame an innocent row.
      if (rows.size() == 1 && !pending_.empty() && pending_.front() == rows.front()
          && alone_retries_ < knobs_.step_retries) {
        ++alone_retries_;
        ++counters_.step_retries;
        break;
      }
      for (auto id : rows)
        if (erase_id(pending_, id))
          failed_.push_back(id);
      alone_retries_ = 0;
      if (pending_.empty())
        conclude_isolation(now, out);
      break;
    case phase::backing_off:
      // The probe failed: the device is still failing.
      count_probe_failure(rows, out);
      start_backoff(now, false);
      break;
  }
  return out;
}

fault_actions fault_policy::step_succeeded(std::span<const seq_id> rows, clock::time_point now) {
  fault_actions out;
  if (phase_ != phase::isolating) {
    recover();
    return out;
  }
  for (auto id : rows)
    if (erase_id(pending_, id))
      passed_.push_back(id);
  alone_retries_ = 0;
  if (pending_.empty())
    conclude_isolation(now, out);
  return out;
}

fault_actions fault_policy::forget(seq_id id, clock::time_point now) {
  fault_actions out;
  records_.erase(id);
  switch (phase_) {
    case phase::retrying:
      // Nothing left to retry: the episode ends without a verdict.
      if (erase_id(retry_rows_, id) && retry_rows_.empty())
        recover();
      break;
    case phase::isolating:
      erase_id(passed_, id);
      erase_id(failed_, id);
      if (!pending_.empty() && pending_.front() == id)
        alone_retries_ = 0;
      if (erase_id(pending_, id) && pending_.empty())
        conclude_isolation(now, out);
      break;
    case phase::normal:
    case phase::backing_off: break;
  }
  return out;
}

void fault_policy::start_isolation_or_backoff(std::span<const seq_id> rows, clock::time_point now,
                                              fault_actions& out) {
  retry_rows_.clear();
  retries_ = 0;
  if (rows.size() < 2) {
    // A row that fails alone with no other row to compare is the device's fault
    // as far as anyone can tell.
    count_probe_failure(rows, out);
    start_backoff(now, true);
    return;
  }
  phase_ = phase::isolating;
  health_ = device_health::degraded;
  pending_.assign(rows.begin(), rows.end());
  alone_retries_ = 0;
  passed_.clear();
  failed_.clear();
  counters_.isolated_rows += rows.size();
}

void fault_policy::conclude_isolation(clock::time_point now, fault_actions& out) {
  if (passed_.empty() && !failed_.empty()) {
    // Every row failed alone: the device, not a row.
    count_probe_failure(failed_, out);
    start_backoff(now, true);
  } else {
    for (auto id : failed_) {
      auto& r = records_[id];
      ++r.alone_failures;
      ++counters_.row_faults;
      if (r.alone_failures > knobs_.row_recomputes)
        out.fail_row.push_back({id, r.alone_failures});
      else
        out.recompute.push_back(id);
    }
    recover();
  }
  pending_.clear();
  passed_.clear();
  failed_.clear();
}

void fault_policy::start_backoff(clock::time_point now, bool first) {
  phase_ = phase::backing_off;
  health_ = device_health::failing;
  const std::chrono::milliseconds initial{std::max<std::uint32_t>(1, knobs_.backoff_initial_ms)};
  const auto cap = std::max(initial, std::chrono::milliseconds{knobs_.backoff_max_ms});
  backoff_ = first || backoff_.count() == 0 ? initial : std::min(backoff_ * 2, cap);
  until_ = now + backoff_;
  ++counters_.backoffs;
}

void fault_policy::count_probe_failure(std::span<const seq_id> rows, fault_actions& out) {
  for (auto id : rows) {
    auto& r = records_[id];
    ++r.probe_failures;
    if (knobs_.give_up_steps != 0 && r.probe_failures >= knobs_.give_up_steps)
      out.fail_device.push_back({id, r.probe_failures});
  }
}

void fault_policy::recover() {
  phase_ = phase::normal;
  health_ = device_health::healthy;
  backoff_ = std::chrono::milliseconds{0};
  retry_rows_.clear();
  retries_ = 0;
  // Failed steps count in a row: a success starts every count again. Rows
  // that failed alone keep their count (they were the culprits).
  std::erase_if(records_, [](auto& kv) { return kv.second.alone_failures == 0; });
  for (auto& [id, r] : records_)
    r.probe_failures = 0;
}

} // namespace kvlane::actors
