#pragma once

// kvlane::tools::soak — app_report: what each soak app reports, and the
// soak's tally of it into expected outcomes and unexpected failures.
//
// Problem it solves: a chaos soak causes most of what goes wrong on purpose
// (apps killed, connections dropped mid-stream, cancels, injected device
// faults), so "something failed" says nothing; what matters is anything the
// soak did NOT cause. Each app prints one line per event on its stdout (a
// pipe to the soak); the tally sorts them:
//   S <key>                                  submitted
//   E <key> <reason> <received> <generated> <hash> <cancel> <injected> <message>
//                                            ended; cancel 1: the app had sent a cancel;
//                                            injected 1: the end's message names a fault
//                                            the soak injected; message: `error` ends only
//   R <key> <errc> <message>                 submit refused
//   F <key> <errc> <message>                 an error instead of the stream's end
//   A <key>                                  abandoned: the app dropped its connection
//   C <errc> <message>                       connect refused
// Expected: completions (length, stop), `cancelled` after the app's cancel,
// `error` naming an injected fault (fault isolation blamed the row: the
// client sees the end with the device's message), abandoned streams. Any
// other end, any R, F or C line, or an app that crashed is unexpected, and a
// run with no completion at all proves nothing: clean() is false for both.
//
// Threading: plain values; one tally per soak, fed from its main loop.

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

namespace kvlane::tools::soak {

// -- the app's side: one line per event ----------------------------------------

/// The simulated NPU's injected faults say so ("sim: injected device_failure on
/// step call 812"); an end whose message carries that was caused by the soak.
bool names_injected_fault(std::string_view message);

std::string submitted_line(std::uint64_t key);
std::string ended_line(std::uint64_t key, std::string_view reason, std::uint64_t received,
                       std::uint64_t generated, std::uint64_t hash, bool cancel_sent,
                       std::string_view message);
std::string refused_submit_line(std::uint64_t key, std::string_view errc, std::string_view message);
std::string failed_line(std::uint64_t key, std::string_view errc, std::string_view message);
std::string abandoned_line(std::uint64_t key);
std::string refused_connect_line(std::string_view errc, std::string_view message);

// -- the soak's side -----------------------------------------------------------------

struct outcome {
  std::string reason;
  std::uint64_t received = 0, generated = 0, hash = 0;
  bool cancel_sent = false; ///< the app had sent a cancel
  bool injected = false;    ///< the end's message names an injected fault
};

using counts = std::map<std::string, std::uint64_t>;

struct tally {
  std::uint64_t submitted = 0;
  std::map<std::uint64_t, outcome> ended; ///< by request key
  // Expected: the soak's own doing.
  std::uint64_t abandoned = 0;         ///< in flight when the app dropped its connection
  std::uint64_t cancelled_by_app = 0;  ///< `cancelled` after the app's cancel
  std::uint64_t ended_by_injected = 0; ///< `error` whose message names an injected fault
  // Unexpected: any one fails the run.
  counts refused_connects; ///< by errc
  counts refused_submits;  ///< by errc
  counts failed_streams;   ///< an error instead of an end, by errc
  counts errored_streams;  ///< ends the soak did not cause, by reason
  std::uint64_t apps_crashed = 0; ///< exited otherwise than 0, and not killed by the soak
  std::vector<std::string> examples; ///< the first distinct unexpected reports, verbatim

  /// Takes one line of an app's report; a line it cannot read is unexpected.
  void take(std::string_view line);
  /// An app that exited otherwise than with 0 (and was not killed by the soak).
  void app_crashed(std::string description);

  std::uint64_t completed() const;  ///< ends with length or stop
  std::uint64_t unexpected() const; ///< every unexpected report
  /// Requests completed and nothing unexpected happened.
  bool clean() const { return completed() > 0 && unexpected() == 0; }

private:
  void note(std::string_view line);
};

std::uint64_t total(const counts& c);
/// "busy 3, connection_lost 1", or "-" when empty.
std::string by_kind(const counts& c);

} // namespace kvlane::tools::soak
