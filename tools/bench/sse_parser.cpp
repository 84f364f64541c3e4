#include "tools/bench/sse_parser.hpp"

namespace kvlane::tools::bench {

void sse_parser::feed(std::string_view bytes, const event_sink& sink) {
  for (std::size_t i = 0; i < bytes.size();) {
    const char c = bytes[i];
    if (after_cr_ && c == '\n') { // the LF of a CRLF: the line already ended at the CR
      after_cr_ = false;
      ++i;
      continue;
    }
    after_cr_ = false;
    if (c == '\r' || c == '\n') {
      after_cr_ = c == '\r';
      line(line_, sink);
      line_.clear();
      ++i;
      continue;
    }
    // Copy the run of bytes up to the next line end at once.
    const auto end = bytes.find_first_of("\r\n", i);
    const auto stop = end == std::string_view::npos ? bytes.size() : end;
    line_.append(bytes.substr(i, stop - i));
    i = stop;
  }
}

void sse_parser::line(std::string_view l, const event_sink& sink) {
  if (l.empty()) { // dispatch
    if (has_data_) {
      ++events_;
      if (sink)
        sink(current_);
    }
    current_ = sse_event{};
    has_data_ = false;
    return;
  }
  if (l.front() == ':')
    return; // a comment (keep-alive pings)
  const auto colon = l.find(':');
  const auto field = l.substr(0, colon);
  std::string_view value;
  if (colon != std::string_view::npos) {
    value = l.substr(colon + 1);
    if (!value.empty() && value.front() == ' ')
      value.remove_prefix(1);
  }
  if (field == "data") {
    if (has_data_)
      current_.data += '\n';
    current_.data.append(value);
    has_data_ = true;
  } else if (field == "event") {
    current_.event = std::string{value};
  } // id, retry and unknown fields do not matter here
}

} // namespace kvlane::tools::bench
