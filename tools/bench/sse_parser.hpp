#pragma once

// kvlane::tools::bench — sse_parser: Server-Sent Events out of a response body.
//
// Problem it solves: an OpenAI-compatible stream is a text/event-stream body
// whose events arrive split anywhere by TCP and by chunk framing: a `data:`
// line may come in two reads, two events in one. The parser takes body bytes
// in pieces of any size and hands over each complete event (its `event:` name
// and its `data:` lines joined by '\n') as soon as the blank line that ends it
// arrives, following the WHATWG rules a browser applies: LF, CRLF or CR line
// ends, one optional space after the colon, comment lines (':') ignored.
//
// Threading: a value; one thread at a time.

#include <cstddef>
#include <functional>
#include <string>
#include <string_view>

namespace kvlane::tools::bench {

struct sse_event {
  std::string event; ///< the `event:` field, empty when none
  std::string data;  ///< the `data:` lines joined by '\n'
};

class sse_parser {
public:
  using event_sink = std::function<void(const sse_event&)>;

  /// Consumes `bytes`; each event completed by them goes to `sink`.
  void feed(std::string_view bytes, const event_sink& sink);

  /// Events handed over so far.
  std::size_t events() const noexcept { return events_; }
  /// Bytes of an event not yet complete (data lines without their blank line).
  bool pending() const noexcept { return !line_.empty() || has_data_; }

private:
  void line(std::string_view l, const event_sink& sink);

  std::string line_;         ///< a partial line
  bool after_cr_ = false;    ///< the last byte was CR: a following LF ends nothing
  sse_event current_;
  bool has_data_ = false;    ///< current_ has a data field
  std::size_t events_ = 0;
};

} // namespace kvlane::tools::bench
