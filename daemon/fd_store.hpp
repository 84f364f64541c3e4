#pragma once

// kvlane::daemon::fd_store — keeps the snapshot store's memfds in systemd's
// file-descriptor store across a restart, and takes them back at start.
//
// Problem it solves: the retained KV lives in a memfd, which the kernel frees
// with its last descriptor. Handing the arena memfd and the index memfd to
// systemd (sd_pid_notify_with_fds: FDSTORE=1, FDNAME=) keeps them alive while
// the service restarts; the next start receives them as LISTEN_FDS with
// LISTEN_FDNAMES and maps the arena in place (actors/store_restart). The
// unit needs FileDescriptorStoreMax= (systemd/kvlaned.service); without it,
// or without systemd (no NOTIFY_SOCKET), nothing is kept and a restart starts
// empty.
//
// Threading: start-up, on the main thread (the environment is read and unset).

#include "actors/store_restart.hpp"

#include <string>
#include <string_view>
#include <vector>

namespace kvlane::daemon {

inline constexpr std::string_view arena_fd_name = "kvlane-store";
inline constexpr std::string_view index_fd_name = "kvlane-store-index";

/// The store descriptors systemd passed in (LISTEN_FDS for this pid, named by
/// LISTEN_FDNAMES); any other passed descriptor is closed. The LISTEN_*
/// variables are unset, so no child inherits them. `notes` receives a line
/// per descriptor, for the log.
actors::store_handoff take_inherited_store(std::vector<std::string>& notes);

/// Sends `fd` to systemd's fd store under `name`. A no-op (false) without
/// NOTIFY_SOCKET; an error names the failing call.
expected<bool, std::string> keep_in_fd_store(int fd, std::string_view name);

/// Asks systemd to close the descriptors stored under `name`.
void remove_from_fd_store(std::string_view name);

} // namespace kvlane::daemon
