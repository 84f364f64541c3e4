#include "daemon/admission.hpp"

#include <fmt/format.h>

namespace kvlane::daemon {

void admission::set_limits(admission_limits limits) {
  std::lock_guard lock{mu_};
  limits_ = limits;
}

admission_limits admission::limits() const {
  std::lock_guard lock{mu_};
  return limits_;
}

std::string admission::retry_hint_locked() const {
  return fmt::format("retry after {} ms", limits_.retry_after.count());
}

std::string admission::retry_hint() const {
  std::lock_guard lock{mu_};
  return retry_hint_locked();
}

std::optional<std::string> admission::admit_client(uid_t uid) {
  std::lock_guard lock{mu_};
  auto& u = users_[uid];
  if (u.clients >= limits_.max_clients_per_user) {
    const auto n = u.clients;
    if (u.clients == 0 && u.requests == 0)
      users_.erase(uid);
    return fmt::format("uid {} already has {} connection(s) ([clients] max_clients_per_user); {}",
                       uid, n, retry_hint_locked());
  }
  ++u.clients;
  return std::nullopt;
}

void admission::release_client(uid_t uid) {
  std::lock_guard lock{mu_};
  auto it = users_.find(uid);
  if (it == users_.end() || it->second.clients == 0)
    return;
  if (--it->second.clients == 0 && it->second.requests == 0)
    users_.erase(it);
}

std::optional<std::string> admission::admit_request(uid_t uid) {
  std::lock_guard lock{mu_};
  if (live_ >= limits_.max_live_sequences)
    return fmt::format("kvlaned already runs {} live sequence(s) ([clients] max_live_sequences); {}",
                       live_, retry_hint_locked());
  auto& u = users_[uid];
  if (u.requests >= limits_.max_requests_per_user) {
    const auto n = u.requests;
    if (u.clients == 0 && u.requests == 0)
      users_.erase(uid);
    return fmt::format("uid {} already has {} live request(s) ([clients] max_requests_per_user); {}",
                       uid, n, retry_hint_locked());
  }
  ++u.requests;
  ++live_;
  return std::nullopt;
}

void admission::release_request(uid_t uid) {
  std::lock_guard lock{mu_};
  auto it = users_.find(uid);
  if (it == users_.end() || it->second.requests == 0)
    return;
  --live_;
  if (--it->second.requests == 0 && it->second.clients == 0)
    users_.erase(it);
}

std::uint64_t admission::live_requests() const {
  std::lock_guard lock{mu_};
  return live_;
}

} // namespace kvlane::daemon
