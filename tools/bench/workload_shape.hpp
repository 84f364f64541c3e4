#pragma once

// kvlane::tools::bench — workload_shape: the workload shapes of the grid (--shapes).
//
// Problem it solves: a scheduler tuned on one trace can lose on another, so
// `make bench-shapes` runs every mode on four shapes of workload that differ
// in what dominates the device's time: the Azure conversation trace (mixed),
// a Mooncake conversation sample (long prompts, long outputs, multi-turn), a
// synthetic prefill-heavy mix (prompt mean 2,048, output mean 24: a
// code-completion service) and a synthetic decode-heavy mix (prompt 256,
// output 512). This names them, parses the list and says what each one is;
// shape_run turns a shape into the options that build its requests.
//
// Threading: plain functions over values.

#include "common/expected.hpp"

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace kvlane::tools::bench {

enum class workload_shape : std::uint8_t { conv, mooncake, prefill_heavy, decode_heavy };

inline constexpr workload_shape all_workload_shapes[] = {
  workload_shape::conv, workload_shape::mooncake, workload_shape::prefill_heavy,
  workload_shape::decode_heavy};

/// conv, mooncake, prefill-heavy, decode-heavy.
std::string_view to_string(workload_shape s) noexcept;

/// One line: where the requests come from and their lengths.
std::string_view describe(workload_shape s) noexcept;

/// Synthetic shapes: the lognormal length means (tokens).
struct shape_lengths {
  double prompt_mean = 0;
  double output_mean = 0;
};
inline constexpr shape_lengths prefill_heavy_lengths{2048, 24};
inline constexpr shape_lengths decode_heavy_lengths{256, 512};

/// The Mooncake shape samples as `make bench-reuse` does: a seeded share of
/// the conversations, prompts (and blocks) scaled for the 4,096-token model.
inline constexpr double mooncake_shape_sample = 0.1;
inline constexpr double mooncake_shape_input_scale = 0.125;

/// A comma list of shape names, in order, without repeats; an unknown or
/// empty name is an error that names it.
expected<std::vector<workload_shape>, std::string> parse_shape_list(std::string_view text);

} // namespace kvlane::tools::bench
