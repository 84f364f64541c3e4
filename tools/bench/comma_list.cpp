#include "tools/bench/comma_list.hpp"

namespace kvlane::tools::bench {

std::vector<std::string_view> split_list(std::string_view s, char sep) {
  std::vector<std::string_view> out;
  std::size_t start = 0;
  for (;;) {
    const auto p = s.find(sep, start);
    out.push_back(s.substr(start, p == std::string_view::npos ? std::string_view::npos : p - start));
    if (p == std::string_view::npos)
      return out;
    start = p + 1;
  }
}

} // namespace kvlane::tools::bench
