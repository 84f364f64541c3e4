#include "daemon/fd_store.hpp"

#include <fmt/format.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>

#include <systemd/sd-daemon.h>
#include <unistd.h>

namespace kvlane::daemon {

actors::store_handoff take_inherited_store(std::vector<std::string>& notes) {
  actors::store_handoff out;
  char** names = nullptr;
  // unset_environment = 1: the LISTEN_* variables describe this process only.
  const int n = sd_listen_fds_with_names(1, &names);
  if (n < 0) {
    notes.push_back(fmt::format("LISTEN_FDS could not be read: {}", std::strerror(-n)));
    return out;
  }
  for (int i = 0; i < n; ++i) {
    const int fd = SD_LISTEN_FDS_START + i;
    const std::string_view name = names != nullptr && names[i] != nullptr ? names[i] : "";
    int* slot = name == arena_fd_name ? &out.arena_fd
                : name == index_fd_name ? &out.index_fd
                                        : nullptr;
    if (slot == nullptr || *slot >= 0) {
      notes.push_back(fmt::format("closing inherited descriptor {} named '{}' (not the store's, "
                                  "or a second one of that name)",
                                  fd, name));
      ::close(fd);
      continue;
    }
    *slot = fd;
    notes.push_back(fmt::format("inherited descriptor {} '{}' from systemd's fd store", fd, name));
  }
  if (names != nullptr) {
    for (int i = 0; i < n; ++i)
      std::free(names[i]);
    std::free(names);
  }
  return out;
}

expected<bool, std::string> keep_in_fd_store(int fd, std::string_view name) {
  const char* socket = std::getenv("NOTIFY_SOCKET");
  if (socket == nullptr || *socket == '\0')
    return false;
  const std::string state = fmt::format("FDSTORE=1\nFDNAME={}", name);
  const int r = sd_pid_notify_with_fds(0, 0, state.c_str(), &fd, 1);
  if (r < 0)
    return unexpected(fmt::format("sd_pid_notify_with_fds(FDSTORE=1, FDNAME={}): {}", name,
                                  std::strerror(-r)));
  return r > 0;
}

void remove_from_fd_store(std::string_view name) {
  const std::string state = fmt::format("FDSTOREREMOVE=1\nFDNAME={}", name);
  (void)sd_notify(0, state.c_str());
}

} // namespace kvlane::daemon
