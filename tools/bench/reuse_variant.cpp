#include "tools/bench/reuse_variant.hpp"

#include "tools/bench/comma_list.hpp"

#include <fmt/format.h>

#include <algorithm>

namespace kvlane::tools::bench {

expected<std::vector<reuse_variant>, std::string> parse_reuse_list(std::string_view list) {
  using actors::reuse_mode;
  using ipc::eviction_value;
  const reuse_variant known[] = {
    {"off", reuse_mode::off, eviction_value::cost},
    {"slot", reuse_mode::slot, eviction_value::cost},
    {"store", reuse_mode::store, eviction_value::cost},
    {"store-recency", reuse_mode::store, eviction_value::recency},
  };
  std::vector<reuse_variant> out;
  for (const auto name : split_list(list)) {
    auto it = std::find_if(std::begin(known), std::end(known),
                           [&](const reuse_variant& v) { return v.name == name; });
    if (it == std::end(known))
      return unexpected(fmt::format("unknown reuse policy '{}' (known: off, slot, store, "
                                    "store-recency)",
                                    name));
    if (std::find(out.begin(), out.end(), *it) == out.end())
      out.push_back(*it);
  }
  return out;
}

} // namespace kvlane::tools::bench
