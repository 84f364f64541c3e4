#include "app_report.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <sstream>

namespace kvlane::tools::soak {

namespace {

/// A message on one line of the report (the last field: it may hold spaces).
std::string one_line(std::string_view m) {
  std::string out{m};
  std::replace(out.begin(), out.end(), '\n', ' ');
  return out.empty() ? "-" : out;
}

constexpr std::size_t max_examples = 8;

} // namespace

bool names_injected_fault(std::string_view message) {
  return message.find("sim: injected ") != std::string_view::npos;
}

std::string submitted_line(std::uint64_t key) {
  return fmt::format("S {}", key);
}

std::string ended_line(std::uint64_t key, std::string_view reason, std::uint64_t received,
                       std::uint64_t generated, std::uint64_t hash, bool cancel_sent,
                       std::string_view message) {
  return fmt::format("E {} {} {} {} {} {:d} {:d} {}", key, reason, received, generated, hash,
                     cancel_sent, names_injected_fault(message),
                     reason == "error" ? one_line(message) : std::string{"-"});
}

std::string refused_submit_line(std::uint64_t key, std::string_view errc, std::string_view message) {
  return fmt::format("R {} {} {}", key, errc, one_line(message));
}

std::string failed_line(std::uint64_t key, std::string_view errc, std::string_view message) {
  return fmt::format("F {} {} {}", key, errc, one_line(message));
}

std::string abandoned_line(std::uint64_t key) {
  return fmt::format("A {}", key);
}

std::string refused_connect_line(std::string_view errc, std::string_view message) {
  return fmt::format("C {} {}", errc, one_line(message));
}

void tally::take(std::string_view line) {
  std::istringstream in{std::string{line}};
  std::string kind;
  in >> kind;
  std::uint64_t key = 0;
  if (kind != "C")
    in >> key;
  if (kind == "S" && in) {
    ++submitted;
  } else if (kind == "E") {
    outcome o;
    int cancel_sent = 0, injected = 0;
    in >> o.reason >> o.received >> o.generated >> o.hash >> cancel_sent >> injected;
    if (!in) {
      ++errored_streams["unreadable"];
      note(line);
      return;
    }
    o.cancel_sent = cancel_sent != 0;
    o.injected = injected != 0;
    if (o.reason == "cancelled" && o.cancel_sent) {
      ++cancelled_by_app;
    } else if (o.reason == "error" && o.injected) {
      ++ended_by_injected;
    } else if (o.reason != "length" && o.reason != "stop") {
      // `error` the soak did not inject, `cancelled` the app did not ask
      // for, `backlog` although the app reads all the time.
      ++errored_streams[o.reason];
      note(line);
    }
    ended[key] = o;
  } else if (kind == "F" || kind == "R" || kind == "C") {
    std::string code;
    in >> code;
    auto& c = kind == "F" ? failed_streams : kind == "R" ? refused_submits : refused_connects;
    ++c[code.empty() ? "?" : code];
    note(line);
  } else if (kind == "A" && in) {
    ++abandoned;
  } else {
    ++errored_streams["unreadable"];
    note(line);
  }
}

void tally::app_crashed(std::string description) {
  ++apps_crashed;
  note(description);
}

std::uint64_t tally::completed() const {
  return static_cast<std::uint64_t>(std::count_if(ended.begin(), ended.end(), [](const auto& e) {
    return e.second.reason == "length" || e.second.reason == "stop";
  }));
}

std::uint64_t tally::unexpected() const {
  return total(refused_connects) + total(refused_submits) + total(failed_streams)
         + total(errored_streams) + apps_crashed;
}

void tally::note(std::string_view line) {
  if (examples.size() < max_examples && std::find(examples.begin(), examples.end(), line) == examples.end())
    examples.emplace_back(line);
}

std::uint64_t total(const counts& c) {
  std::uint64_t n = 0;
  for (const auto& [k, v] : c)
    n += v;
  return n;
}

std::string by_kind(const counts& c) {
  std::string out;
  for (const auto& [k, n] : c)
    out += fmt::format("{}{} {}", out.empty() ? "" : ", ", k, n);
  return out.empty() ? "-" : out;
}

} // namespace kvlane::tools::soak
