#include "tools/bench/restart_variant.hpp"

#include "tools/bench/comma_list.hpp"

#include <fmt/format.h>

#include <algorithm>

namespace kvlane::tools::bench {

std::string_view to_string(restart_kind k) noexcept {
  switch (k) {
    case restart_kind::none: return "baseline";
    case restart_kind::fd_store: return "fdstore";
    case restart_kind::disk: return "disk";
    case restart_kind::swap: return "swap";
  }
  return "baseline";
}

expected<std::vector<restart_kind>, std::string> parse_restart_list(std::string_view list) {
  std::vector<restart_kind> out;
  for (const auto name : split_list(list)) {
    restart_kind k{};
    if (name == "fdstore")
      k = restart_kind::fd_store;
    else if (name == "disk")
      k = restart_kind::disk;
    else if (name == "swap")
      k = restart_kind::swap;
    else
      return unexpected(fmt::format("unknown restart '{}' (known: fdstore, disk, swap; the "
                                    "baseline always runs)",
                                    name));
    if (std::find(out.begin(), out.end(), k) == out.end())
      out.push_back(k);
  }
  return out;
}

} // namespace kvlane::tools::bench
