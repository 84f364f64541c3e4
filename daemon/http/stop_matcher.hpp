#pragma once

// kvlane::daemon::http::stop_matcher — stop strings matched on the text side.
//
// Problem it solves: a stop string ("\nUser:") may arrive split across tokens
// and across stream chunks. Text that could still be the start of a stop
// string is held back until the next piece decides it, so no part of a stop
// string ever reaches the client; generation ends at the first match and the
// text before it is released.
//
// A plain value used by one thread. Memory: the held-back text is shorter
// than the longest stop string.

#include <string>
#include <string_view>
#include <vector>

namespace kvlane::daemon::http {

class stop_matcher {
public:
  explicit stop_matcher(std::vector<std::string> stops);

  struct result {
    std::string text;     ///< safe to send now
    bool stopped = false; ///< a stop string matched: `text` ends just before it
  };

  /// Appends `piece`; returns what can be sent. After a match every call
  /// returns nothing.
  result feed(std::string_view piece);

  /// The end of generation: releases the held-back text (nothing after a match).
  std::string flush();

  bool stopped() const noexcept { return stopped_; }

private:
  std::vector<std::string> stops_;
  std::string held_;
  bool stopped_ = false;
};

} // namespace kvlane::daemon::http
