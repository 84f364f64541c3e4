#pragma once

// kvlane::tools::bench — comma_list: the items of a command-line list such
// as `--modes fcfs,overlap`, in order, empty items kept (callers reject them
// as unknown names).

#include <string_view>
#include <vector>

namespace kvlane::tools::bench {

/// The parts of `s` between `sep`s: "a,,b" gives "a", "", "b"; "" gives one "".
std::vector<std::string_view> split_list(std::string_view s, char sep = ',');

} // namespace kvlane::tools::bench
