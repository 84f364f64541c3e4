#pragma once

// kvlane::tools::bench — mooncake_trace: the Mooncake conversation trace.
//
// Problem it solves: the Mooncake trace (FAST'25 release; one JSON object a
// line: timestamp in ms, input_length, output_length, hash_ids) is the
// multi-turn workload with known prefix sharing: `hash_ids` name the prompt's
// 512-token blocks, so two requests whose lists start with the same ids share
// that prefix. Parsed strictly: a bad line is reported with its number and the
// field at fault instead of silently skewing a benchmark.
//
// Threading: plain functions over values.

#include "common/expected.hpp"
#include "tools/bench/trace.hpp"

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace kvlane::tools::bench {

/// Tokens per hash id in the published trace.
inline constexpr std::uint32_t mooncake_block_tokens = 512;

/// One line of the trace.
struct mooncake_request {
  double arrival_s = 0;              ///< since the first line
  std::uint32_t input_length = 1;    ///< prompt tokens, >= 1
  std::uint32_t output_length = 1;   ///< output tokens, >= 1
  std::vector<std::uint64_t> hash_ids; ///< one per block of the prompt, the last one partial
};

/// Parses the trace: one object a line with exactly the fields `timestamp`
/// (ms, a whole number >= 0, never earlier than the previous line's),
/// `input_length` and `output_length` (whole numbers >= 1) and `hash_ids`
/// (whole numbers >= 0, as many as the blocks of `block_tokens` the input
/// needs: ceil(input_length / block_tokens)). Only the first `max_rows` lines
/// are read (0 = all). Lines may end in CRLF; only a final line break may leave
/// an empty line. Errors read "<source>:<line>: <field>: <what>".
expected<std::vector<mooncake_request>, trace_error>
parse_mooncake(std::string_view jsonl, std::size_t max_rows = 0,
               std::string_view source = "<trace>",
               std::uint32_t block_tokens = mooncake_block_tokens);

/// Reads `path` and delegates to parse_mooncake.
expected<std::vector<mooncake_request>, trace_error> load_mooncake(const std::string& path,
                                                                   std::size_t max_rows = 0);

} // namespace kvlane::tools::bench
