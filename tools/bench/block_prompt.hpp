#pragma once

// kvlane::tools::bench — block_prompt: prompts built from a trace's block ids.
//
// Problem it solves: a trace with prefix structure (Mooncake's hash_ids) has
// no text; prefix reuse can only be measured if two requests that name the
// same blocks send the same tokens, and requests that name different blocks
// do not. Each block id maps to a fixed pseudo-random run of letters and
// spaces (plausible input for the sim's byte tokenizer): token k of block id
// is a pure function of (id, k), so a block cut short is a prefix of the whole
// block, whatever the block size.
//
// Threading: plain functions over values.

#include "backends/backend.hpp"

#include <cstdint>
#include <span>
#include <vector>

namespace kvlane::tools::bench {

/// Appends the first `count` tokens of block `id` to `out`.
void append_block_tokens(std::uint64_t id, std::uint32_t count,
                         std::vector<backends::token_id>& out);

/// The prompt of `length` tokens made of `hash_ids`' blocks of `block_tokens`
/// each, in order, the last one cut to fit. A length beyond the blocks'
/// tokens is cut to them (hash_ids.size() x block_tokens).
std::vector<backends::token_id> block_prompt(std::span<const std::uint64_t> hash_ids,
                                             std::uint32_t block_tokens, std::uint32_t length);

} // namespace kvlane::tools::bench
