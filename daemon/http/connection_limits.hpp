#pragma once

// kvlane::daemon::http::connection_limits — how many connections are open, in all and per
// peer address, and who may open another.
//
// Problem it solves: one client holding max_connections idle sockets would lock everyone
// else out. Each peer address gets at most max_connections_per_peer; over it, a new
// connection from that address is answered 503 (a client can tell why and retry), within a
// small, fixed number of such answers in flight; past the total max_connections, or past
// that number, a connection is closed at once. Refusals are logged at most once a minute
// per peer, with a count of the ones in between.
//
// Threading: admit() on the HTTP thread; a ticket may be released on any thread (its
// connection's last owner). Shared by the server and its connections (shared_ptr).

#include <boost/asio/ip/address.hpp>

#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>

namespace kvlane::daemon::http {

class connection_limits : public std::enable_shared_from_this<connection_limits> {
public:
  /// Answers (503) to over-cap peers in flight at once; more are closed at accept.
  static constexpr std::uint32_t max_refusals_in_flight = 64;
  /// Peers remembered for rate-limiting the refusal log.
  static constexpr std::size_t max_logged_peers = 4096;

  connection_limits(std::uint32_t max_total, std::uint32_t max_per_peer);

  /// Holds one connection's place until destroyed.
  class ticket {
  public:
    ticket() = default;
    ticket(ticket&& o) noexcept;
    ticket& operator=(ticket&& o) noexcept;
    ~ticket();
    ticket(const ticket&) = delete;
    ticket& operator=(const ticket&) = delete;

  private:
    friend class connection_limits;
    std::shared_ptr<connection_limits> owner_;
    std::string peer_;
    bool refusal_ = false;
  };

  enum class verdict {
    admit,  ///< serve it
    refuse, ///< its peer is over max_connections_per_peer: answer 503 and close
    close,  ///< over max_connections, or too many refusals in flight: close at once
  };
  struct admission {
    verdict what = verdict::close;
    ticket place; ///< for admit and refuse
  };
  /// The verdict for a new connection from `peer`; logs refusals (rate-limited).
  admission admit(const boost::asio::ip::address& peer);

  /// Connections served now (refusals not counted).
  std::uint32_t open() const;
  /// Connections served now from `peer`.
  std::uint32_t open_from(const boost::asio::ip::address& peer) const;

  /// The address a peer is counted under: an IPv4-mapped IPv6 address as IPv4.
  static std::string peer_key(const boost::asio::ip::address& peer);

private:
  void release(const std::string& peer, bool refusal) noexcept;
  void log_refusal(const std::string& peer, bool per_peer);

  const std::uint32_t max_total_;
  const std::uint32_t max_per_peer_;
  mutable std::mutex mu_;
  std::uint32_t open_ = 0;
  std::uint32_t refusing_ = 0;
  std::unordered_map<std::string, std::uint32_t> per_peer_;
  struct log_state {
    std::chrono::steady_clock::time_point last;
    std::uint64_t since = 0; ///< refusals not logged since `last`
  };
  std::unordered_map<std::string, log_state> logged_; ///< HTTP thread only
  std::uint64_t closed_over_total_ = 0;               ///< HTTP thread only
};

} // namespace kvlane::daemon::http
