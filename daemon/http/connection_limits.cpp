#include "daemon/http/connection_limits.hpp"

#include "common/logging.hpp"

#include <fmt/format.h>

namespace kvlane::daemon::http {

namespace {

/// How often a refusal is logged for one peer (and for the total cap).
constexpr auto log_interval = std::chrono::minutes(1);

} // namespace

connection_limits::connection_limits(std::uint32_t max_total, std::uint32_t max_per_peer)
  : max_total_(max_total), max_per_peer_(max_per_peer) {}

connection_limits::ticket::ticket(ticket&& o) noexcept
  : owner_(std::move(o.owner_)), peer_(std::move(o.peer_)), refusal_(o.refusal_) {}

connection_limits::ticket& connection_limits::ticket::operator=(ticket&& o) noexcept {
  if (this != &o) {
    if (owner_)
      owner_->release(peer_, refusal_);
    owner_ = std::move(o.owner_);
    peer_ = std::move(o.peer_);
    refusal_ = o.refusal_;
  }
  return *this;
}

connection_limits::ticket::~ticket() {
  if (owner_)
    owner_->release(peer_, refusal_);
}

std::string connection_limits::peer_key(const boost::asio::ip::address& peer) {
  if (peer.is_v6() && peer.to_v6().is_v4_mapped())
    return boost::asio::ip::make_address_v4(boost::asio::ip::v4_mapped, peer.to_v6()).to_string();
  return peer.to_string();
}

connection_limits::admission connection_limits::admit(const boost::asio::ip::address& peer) {
  auto key = peer_key(peer);
  admission out;
  enum class cap { none, total, per_peer } over = cap::none;
  {
    std::lock_guard lock{mu_};
    const auto it = per_peer_.find(key);
    const std::uint32_t from_peer = it == per_peer_.end() ? 0 : it->second;
    if (open_ >= max_total_) {
      over = cap::total;
    } else if (from_peer >= max_per_peer_) {
      over = cap::per_peer;
      if (refusing_ < max_refusals_in_flight) {
        ++refusing_;
        out.what = verdict::refuse;
        out.place.refusal_ = true;
      }
    } else {
      ++per_peer_[key];
      ++open_;
      out.what = verdict::admit;
    }
  }
  if (over != cap::none)
    log_refusal(key, over == cap::per_peer);
  if (out.what != verdict::close) {
    out.place.owner_ = shared_from_this();
    out.place.peer_ = std::move(key);
  }
  return out;
}

void connection_limits::release(const std::string& peer, bool refusal) noexcept {
  std::lock_guard lock{mu_};
  if (refusal) {
    --refusing_;
    return;
  }
  --open_;
  if (auto it = per_peer_.find(peer); it != per_peer_.end() && --it->second == 0)
    per_peer_.erase(it);
}

void connection_limits::log_refusal(const std::string& peer, bool per_peer) {
  const auto now = std::chrono::steady_clock::now();
  // The total cap is logged under the empty key: one message a minute, whoever the peer.
  const std::string key = per_peer ? peer : std::string{};
  auto it = logged_.find(key);
  if (it != logged_.end() && now - it->second.last < log_interval) {
    ++it->second.since;
    return;
  }
  if (it == logged_.end()) {
    if (logged_.size() >= max_logged_peers)
      std::erase_if(logged_, [&](const auto& e) { return now - e.second.last >= log_interval; });
    if (logged_.size() >= max_logged_peers)
      return; // thousands of peers refused within a minute: stay quiet rather than grow
    it = logged_.emplace(key, log_state{}).first;
  }
  const auto since = it->second.since;
  it->second = log_state{now, 0};
  const auto more = since == 0 ? std::string{}
                               : fmt::format(" ({} more refused in the last minute)", since);
  if (per_peer)
    logging::get("http")->warn("{} has {} connections open (max_connections_per_peer): answering "
                               "its new connections with 503{}",
                               peer, max_per_peer_, more);
  else
    logging::get("http")->warn("{} connections open (max_connections): closing new ones at "
                               "accept{}",
                               max_total_, more);
}

std::uint32_t connection_limits::open() const {
  std::lock_guard lock{mu_};
  return open_;
}

std::uint32_t connection_limits::open_from(const boost::asio::ip::address& peer) const {
  std::lock_guard lock{mu_};
  const auto it = per_peer_.find(peer_key(peer));
  return it == per_peer_.end() ? 0 : it->second;
}

} // namespace kvlane::daemon::http
