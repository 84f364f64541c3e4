#include "ipc/peer_access.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstring>
#include <grp.h>
#include <pwd.h>
#include <sys/socket.h>
#include <unistd.h>

namespace kvlane::ipc {

namespace {

template <class Id>
bool parse_id(const std::string& text, Id& out) {
  unsigned long v = 0;
  auto [p, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (ec != std::errc{} || p != text.data() + text.size())
    return false;
  out = static_cast<Id>(v);
  return true;
}

expected<uid_t, std::string> resolve_user(const std::string& name) {
  uid_t id = 0;
  if (parse_id(name, id))
    return id;
  passwd pw{};
  passwd* result = nullptr;
  std::vector<char> buf(16384);
  if (getpwnam_r(name.c_str(), &pw, buf.data(), buf.size(), &result) != 0 || !result)
    return unexpected(fmt::format("unknown user '{}'", name));
  return pw.pw_uid;
}

expected<gid_t, std::string> resolve_group(const std::string& name) {
  gid_t id = 0;
  if (parse_id(name, id))
    return id;
  group gr{};
  group* result = nullptr;
  std::vector<char> buf(16384);
  if (getgrnam_r(name.c_str(), &gr, buf.data(), buf.size(), &result) != 0 || !result)
    return unexpected(fmt::format("unknown group '{}'", name));
  return gr.gr_gid;
}

} // namespace

expected<peer_credentials, std::string> read_peer_credentials(int fd) {
  ucred cred{};
  socklen_t len = sizeof cred;
  if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0)
    return unexpected(fmt::format("SO_PEERCRED: {}", std::strerror(errno)));
  peer_credentials out;
  out.pid = cred.pid;
  out.uid = cred.uid;
  out.gid = cred.gid;
  std::vector<gid_t> groups(64);
  len = static_cast<socklen_t>(groups.size() * sizeof(gid_t));
  if (getsockopt(fd, SOL_SOCKET, SO_PEERGROUPS, groups.data(), &len) != 0 && errno == ERANGE) {
    groups.resize(len / sizeof(gid_t));
    if (getsockopt(fd, SOL_SOCKET, SO_PEERGROUPS, groups.data(), &len) != 0)
      len = 0;
  }
  groups.resize(len / sizeof(gid_t));
  out.groups = std::move(groups);
  return out;
}

expected<access_policy, std::string> access_policy::create(const std::vector<std::string>& users,
                                                           const std::vector<std::string>& groups,
                                                           bool open_when_empty) {
  access_policy p;
  for (auto& u : users) {
    auto id = resolve_user(u);
    if (!id)
      return unexpected(std::move(id).error());
    p.users_.push_back(*id);
  }
  for (auto& g : groups) {
    auto id = resolve_group(g);
    if (!id)
      return unexpected(std::move(id).error());
    p.groups_.push_back(*id);
  }
  p.open_ = open_when_empty && users.empty() && groups.empty();
  return p;
}

bool access_policy::allows(const peer_credentials& peer) const noexcept {
  if (open_ || peer.uid == 0 || peer.uid == ::geteuid())
    return true;
  if (std::find(users_.begin(), users_.end(), peer.uid) != users_.end())
    return true;
  if (std::find(groups_.begin(), groups_.end(), peer.gid) != groups_.end())
    return true;
  return std::any_of(peer.groups.begin(), peer.groups.end(), [&](gid_t g) {
    return std::find(groups_.begin(), groups_.end(), g) != groups_.end();
  });
}

std::string access_policy::describe(const peer_credentials& peer) {
  passwd pw{};
  passwd* result = nullptr;
  std::vector<char> buf(16384);
  if (getpwuid_r(peer.uid, &pw, buf.data(), buf.size(), &result) == 0 && result)
    return fmt::format("user {} ({}), pid {}", peer.uid, pw.pw_name, peer.pid);
  return fmt::format("user {}, pid {}", peer.uid, peer.pid);
}

} // namespace kvlane::ipc
