#pragma once

// kvlane::tools::bench — conversation_workload: Mooncake requests as a replayable workload.
//
// Problem it solves: the Mooncake trace is a datacenter's half hour; an edge
// box must see whole conversations at their real think times, scaled to its
// model. A conversation is the requests that share their first non-system
// block (hash_ids[1]; block 0 is the system prompt every request shares; a
// request with no other block is a conversation of its own). A seeded draw
// keeps each conversation whole with probability F (the draw hashes the seed
// and the conversation's key, so a conversation's fate does not depend on the
// others); input lengths and the 512-token block size are multiplied by the
// input scale; prompts are built from the blocks (block_prompt). Each
// request's owner (the reuse scope) is its conversation's, or one shared user.
//
// Threading: plain functions over values.

#include "tools/bench/mooncake_trace.hpp"
#include "tools/bench/trace.hpp"

#include <cstdint>
#include <optional>
#include <span>
#include <string_view>
#include <vector>

namespace kvlane::tools::bench {

/// Who sends a conversation trace's requests.
enum class trace_users : std::uint8_t {
  conversation, ///< one user per conversation: reuse stays within a conversation
  one,          ///< one user for all: conversations may also share the system prompt
};
std::string_view to_string(trace_users u) noexcept;
std::optional<trace_users> parse_trace_users(std::string_view s) noexcept;

/// The conversation of each request: indices 0.. in order of first appearance.
std::vector<std::uint32_t> conversation_ids(std::span<const mooncake_request> requests);

/// Whether conversation `key` (its first non-system block) is kept by a draw
/// with probability `fraction` under `seed`.
bool keep_conversation(std::uint64_t key, double fraction, std::uint64_t seed) noexcept;

struct conversation_options {
  double input_scale = 1.0;          ///< multiplies input lengths and the block size
  double sample = 1.0;               ///< share of conversations kept, (0, 1]
  std::uint64_t seed = 1;
  trace_users users = trace_users::conversation;
};

struct conversation_workload {
  std::vector<trace_request> requests; ///< kept, in arrival order, from the first kept one
  std::size_t conversations = 0;       ///< in the trace (as read)
  std::size_t kept_conversations = 0;
  std::uint32_t block_tokens = 0;      ///< after scaling
};

/// Samples, scales and builds the prompts of `requests` (owner, prompt and
/// prompt_tokens set; arrivals relative to the first kept request; each
/// request's previous_turn is the conversation's request before it).
conversation_workload build_conversation_workload(std::span<const mooncake_request> requests,
                                                  const conversation_options& o);

/// For each request, in order: the longest prefix of its prompt (its first
/// prompt_tokens tokens) that an earlier request of the same owner and model sent, at
/// most prompt_tokens - 1 (the last token is always prefilled for its logits),
/// or 0 when shorter than `min_prefix_tokens`: what a prefix cache with
/// unlimited room would reuse, the requests served in this order. Requests
/// without prompt tokens (synthetic) share nothing.
std::vector<std::uint32_t> achievable_reuse(std::span<const trace_request> requests,
                                            std::uint32_t min_prefix_tokens);

} // namespace kvlane::tools::bench
