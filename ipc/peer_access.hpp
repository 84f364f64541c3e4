#pragma once

// kvlane::ipc::peer_access — who is on the other end of a Unix socket, and
// whether they may use it.
//
// The kernel vouches for the peer's uid, gid and supplementary groups
// (SO_PEERCRED, SO_PEERGROUPS); nothing the peer sends is trusted for this.
// Root and the daemon's own user are always allowed. Names in the allow lists
// are resolved once, when the policy is built, so a renamed user does not
// silently gain or lose access until the next reload.
//
// Threading: a policy is immutable after create(); share it freely.

#include "common/expected.hpp"

#include <string>
#include <sys/types.h>
#include <vector>

namespace kvlane::ipc {

struct peer_credentials {
  pid_t pid = 0;
  uid_t uid = 0;
  gid_t gid = 0;
  std::vector<gid_t> groups; ///< supplementary groups
};

/// Reads the credentials of the peer of a connected Unix socket.
expected<peer_credentials, std::string> read_peer_credentials(int fd);

class access_policy {
public:
  /// Builds a policy from names or numeric ids. `open_when_empty`: with both
  /// lists empty, allow everyone (true) or only root and the daemon's user.
  static expected<access_policy, std::string> create(const std::vector<std::string>& users,
                                                     const std::vector<std::string>& groups,
                                                     bool open_when_empty);

  bool allows(const peer_credentials& peer) const noexcept;

  /// "user 1000 (alice)" style text for error messages and logs.
  static std::string describe(const peer_credentials& peer);

private:
  std::vector<uid_t> users_;
  std::vector<gid_t> groups_;
  bool open_ = false;
};

} // namespace kvlane::ipc
