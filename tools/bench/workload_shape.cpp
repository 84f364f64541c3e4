#include "tools/bench/workload_shape.hpp"

#include "tools/bench/comma_list.hpp"

#include <fmt/format.h>

#include <algorithm>

namespace kvlane::tools::bench {

std::string_view to_string(workload_shape s) noexcept {
  switch (s) {
  case workload_shape::conv:
    return "conv";
  case workload_shape::mooncake:
    return "mooncake";
  case workload_shape::prefill_heavy:
    return "prefill-heavy";
  case workload_shape::decode_heavy:
    return "decode-heavy";
  }
  return "?";
}

std::string_view describe(workload_shape s) noexcept {
  switch (s) {
  case workload_shape::conv:
    return "Azure LLM 2023 conversation trace (--azure-trace), its first --requests rows";
  case workload_shape::mooncake:
    return "Mooncake conversation trace (--mooncake-trace): 0.1 of its conversations, prompts "
           "x 0.125, causal turns, the first --requests requests of the sample";
  case workload_shape::prefill_heavy:
    return "synthetic Poisson, lognormal lengths (sigma 0.5): prompt mean 2048, output mean 24";
  case workload_shape::decode_heavy:
    return "synthetic Poisson, lognormal lengths (sigma 0.5): prompt mean 256, output mean 512";
  }
  return "?";
}

expected<std::vector<workload_shape>, std::string> parse_shape_list(std::string_view text) {
  std::vector<workload_shape> out;
  for (auto name : split_list(text, ',')) {
    const auto* it = std::find_if(std::begin(all_workload_shapes), std::end(all_workload_shapes),
                                  [&](workload_shape s) { return to_string(s) == name; });
    if (it == std::end(all_workload_shapes))
      return unexpected(fmt::format("unknown shape '{}' (known: conv, mooncake, prefill-heavy, "
                                    "decode-heavy)",
                                    name));
    if (std::find(out.begin(), out.end(), *it) == out.end())
      out.push_back(*it);
  }
  return out;
}

} // namespace kvlane::tools::bench
