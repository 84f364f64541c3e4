#include "daemon/notifier.hpp"

#include <fmt/format.h>
#include <systemd/sd-daemon.h>

#include <string>

namespace kvlane::daemon {

namespace {

void send(const std::string& text) {
  (void)sd_notify(0, text.c_str());
}

// STATUS= ends at the first newline: keep it to one line.
std::string one_line(std::string_view s) {
  std::string out{s};
  for (auto& c : out)
    if (c == '\n')
      c = ' ';
  return out;
}

} // namespace

void notifier::ready(std::string_view status) const {
  send(fmt::format("READY=1\nSTATUS={}", one_line(status)));
}

void notifier::status(std::string_view status) const {
  send(fmt::format("STATUS={}", one_line(status)));
}

void notifier::reloading() const {
  send("RELOADING=1");
}

void notifier::stopping() const {
  send("STOPPING=1");
}

void notifier::watchdog() const {
  send("WATCHDOG=1");
}

std::optional<std::chrono::microseconds> notifier::watchdog_interval() const {
  std::uint64_t usec = 0;
  if (sd_watchdog_enabled(0, &usec) > 0 && usec > 0)
    return std::chrono::microseconds(usec);
  return std::nullopt;
}

} // namespace kvlane::daemon
