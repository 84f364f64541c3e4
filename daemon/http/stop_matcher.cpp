#include "daemon/http/stop_matcher.hpp"

#include <algorithm>

namespace kvlane::daemon::http {

stop_matcher::stop_matcher(std::vector<std::string> stops) : stops_(std::move(stops)) {
  std::erase_if(stops_, [](const std::string& s) { return s.empty(); });
}

stop_matcher::result stop_matcher::feed(std::string_view piece) {
  result out;
  if (stopped_)
    return out;
  held_.append(piece);
  if (stops_.empty()) {
    out.text.swap(held_);
    return out;
  }
  // The earliest complete match wins (ties: the one found first in the list).
  auto first = std::string::npos;
  for (const auto& s : stops_)
    first = std::min(first, held_.find(s));
  if (first != std::string::npos) {
    out.text = held_.substr(0, first);
    out.stopped = stopped_ = true;
    held_.clear();
    return out;
  }
  // Hold back the longest suffix that is a proper prefix of some stop string.
  std::size_t keep = 0;
  for (const auto& s : stops_) {
    const auto longest = std::min(s.size() - 1, held_.size());
    for (auto n = longest; n > keep; --n) {
      if (std::string_view{held_}.substr(held_.size() - n) == std::string_view{s}.substr(0, n)) {
        keep = n;
        break;
      }
    }
  }
  out.text = held_.substr(0, held_.size() - keep);
  held_.erase(0, held_.size() - keep);
  return out;
}

std::string stop_matcher::flush() {
  std::string out;
  if (!stopped_)
    out.swap(held_);
  return out;
}

} // namespace kvlane::daemon::http
