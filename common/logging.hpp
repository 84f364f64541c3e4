#pragma once

// kvlane::logging — one named spdlog logger per subsystem.
//
// On a terminal, log lines are coloured; otherwise (systemd, pipes) each line
// starts with a syslog priority prefix "<N>" that journald turns into the
// entry's priority, and carries no timestamp (journald adds its own).
// setup() must run once before any logger is used; levels can change at any
// time afterwards (set_level is thread-safe).

#include <spdlog/spdlog.h>

#include <map>
#include <memory>
#include <span>
#include <string>
#include <string_view>

namespace kvlane::logging {

/// Names of the subsystem loggers, in the order they are created.
std::span<const std::string_view> logger_names() noexcept;

enum class sink_style { automatic, terminal, journal };

/// Creates every subsystem logger writing to stderr with `default_level`, then
/// applies `overrides` (logger name → level). Returns an error message for an
/// unknown logger or level name, empty on success.
std::string setup(std::string_view default_level,
                  const std::map<std::string, std::string>& overrides,
                  sink_style style = sink_style::automatic);

/// Sets one logger's level ("*" = all). Returns an error message or empty.
std::string set_level(std::string_view logger, std::string_view level);

/// The named logger; falls back to the "daemon" logger for unknown names.
std::shared_ptr<spdlog::logger> get(std::string_view name);

/// True if `name` is one of logger_names().
bool known_logger(std::string_view name) noexcept;

/// True if `level` names a spdlog level (trace, debug, info, warn, error, critical, off).
bool valid_level(std::string_view level) noexcept;

} // namespace kvlane::logging
