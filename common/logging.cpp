#include "common/logging.hpp"

#include <spdlog/sinks/base_sink.h>
#include <spdlog/sinks/stdout_color_sinks.h>

#include <array>
#include <cstdio>
#include <mutex>
#include <unistd.h>

namespace kvlane::logging {

namespace {

constexpr std::array<std::string_view, 8> names{"daemon", "backend", "scheduler", "store",
                                                "ipc",    "admin",   "probe",     "http"};

// stderr sink for journald: "<priority>logger: message". No timestamp, since
// the journal records its own.
class journal_sink final : public spdlog::sinks::base_sink<std::mutex> {
protected:
  void sink_it_(const spdlog::details::log_msg& msg) override {
    spdlog::memory_buf_t line;
    fmt::format_to(std::back_inserter(line), "<{}>{}: ", priority(msg.level),
                   std::string_view{msg.logger_name.data(), msg.logger_name.size()});
    line.append(msg.payload.data(), msg.payload.data() + msg.payload.size());
    line.push_back('\n');
    std::fwrite(line.data(), 1, line.size(), stderr);
  }
  void flush_() override { std::fflush(stderr); }

private:
  static int priority(spdlog::level::level_enum l) {
    switch (l) {
      case spdlog::level::trace:
      case spdlog::level::debug: return 7;
      case spdlog::level::info: return 6;
      case spdlog::level::warn: return 4;
      case spdlog::level::err: return 3;
      case spdlog::level::critical: return 2;
      default: return 6;
    }
  }
};

std::mutex setup_mutex;

bool parse_level(std::string_view text, spdlog::level::level_enum& out) {
  static constexpr std::array<std::pair<std::string_view, spdlog::level::level_enum>, 7> table{{
    {"trace", spdlog::level::trace},
    {"debug", spdlog::level::debug},
    {"info", spdlog::level::info},
    {"warn", spdlog::level::warn},
    {"error", spdlog::level::err},
    {"critical", spdlog::level::critical},
    {"off", spdlog::level::off},
  }};
  for (auto& [name, level] : table)
    if (name == text) {
      out = level;
      return true;
    }
  return false;
}

} // namespace

bool known_logger(std::string_view name) noexcept {
  for (auto n : names)
    if (n == name)
      return true;
  return false;
}

std::span<const std::string_view> logger_names() noexcept {
  return names;
}

bool valid_level(std::string_view level) noexcept {
  spdlog::level::level_enum unused;
  return parse_level(level, unused);
}

std::string setup(std::string_view default_level,
                  const std::map<std::string, std::string>& overrides, sink_style style) {
  spdlog::level::level_enum level;
  if (!parse_level(default_level, level))
    return fmt::format("unknown log level '{}'", default_level);
  for (auto& [name, lvl] : overrides) {
    if (!known_logger(name))
      return fmt::format("unknown logger '{}'", name);
    if (!valid_level(lvl))
      return fmt::format("unknown log level '{}' for logger '{}'", lvl, name);
  }
  if (style == sink_style::automatic)
    style = isatty(STDERR_FILENO) ? sink_style::terminal : sink_style::journal;

  std::lock_guard guard{setup_mutex};
  spdlog::sink_ptr sink;
  if (style == sink_style::terminal) {
    sink = std::make_shared<spdlog::sinks::stderr_color_sink_mt>();
    sink->set_pattern("%Y-%m-%d %H:%M:%S.%e %^%-5l%$ %n: %v");
  } else {
    sink = std::make_shared<journal_sink>();
  }
  for (auto name : names) {
    std::string n{name};
    spdlog::drop(n);
    auto logger = std::make_shared<spdlog::logger>(n, sink);
    logger->set_level(level);
    logger->flush_on(spdlog::level::info);
    spdlog::register_logger(logger);
  }
  spdlog::set_default_logger(spdlog::get("daemon"));
  for (auto& [name, lvl] : overrides)
    set_level(name, lvl);
  return {};
}

std::string set_level(std::string_view logger, std::string_view level) {
  spdlog::level::level_enum l;
  if (!parse_level(level, l))
    return fmt::format("unknown log level '{}'", level);
  if (logger == "*") {
    for (auto name : names)
      if (auto lg = spdlog::get(std::string{name}))
        lg->set_level(l);
    return {};
  }
  if (!known_logger(logger))
    return fmt::format("unknown logger '{}'", logger);
  if (auto lg = spdlog::get(std::string{logger}))
    lg->set_level(l);
  return {};
}

std::shared_ptr<spdlog::logger> get(std::string_view name) {
  if (auto lg = spdlog::get(std::string{name}))
    return lg;
  if (auto lg = spdlog::get("daemon"))
    return lg;
  return spdlog::default_logger();
}

} // namespace kvlane::logging
