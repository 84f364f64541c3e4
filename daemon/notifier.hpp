#pragma once

// kvlane::daemon::notifier — the systemd notification protocol (sd_notify).
//
// Under systemd with Type=notify, NOTIFY_SOCKET is set and these calls send
// READY=1, STATUS=, RELOADING=1, STOPPING=1 and WATCHDOG=1; elsewhere they do
// nothing. The watchdog interval comes from WATCHDOG_USEC (sd_watchdog_enabled).
//
// Threading: every method may be called from any thread.

#include <chrono>
#include <optional>
#include <string_view>

namespace kvlane::daemon {

class notifier {
public:
  void ready(std::string_view status) const;
  void status(std::string_view status) const;
  void reloading() const;
  void stopping() const;
  void watchdog() const;

  /// How often systemd expects WATCHDOG=1, if it does.
  std::optional<std::chrono::microseconds> watchdog_interval() const;
};

} // namespace kvlane::daemon
