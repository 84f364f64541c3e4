#pragma once

// kvlane::actors::reuse_policy — the knobs of conversation KV reuse.
//
// Problem it solves: whether and how a finished request's KV is kept for the
// next turn is a policy of the scheduler; the daemon's config ([reuse] in
// kvlane.toml) maps onto this type, tools and tests build it directly.
// docs/scheduling.md ("Conversations") explains each knob, docs/config.md
// their ranges. Every knob may change live (kvlane reload).

#include <cstdint>
#include <string_view>

namespace kvlane::actors {

/// Where a finished request's KV may be kept for reuse.
enum class reuse_mode : std::uint8_t {
  off,   ///< freed when the request ends (every turn re-prefills its history)
  slot,  ///< kept only while it sits in its slot (llama.cpp server's cache_prompt)
  store, ///< kept in its slot, then parked in the snapshot store (kvlane)
};
std::string_view to_string(reuse_mode m) noexcept;

/// Who may reuse a retained prefix.
enum class reuse_scope : std::uint8_t {
  user, ///< only the user (peer uid) whose request produced it
  all,  ///< every user of the model: a shared system prompt is prefilled once, but one user
        ///< can learn from a fast first token that another user sent the same tokens
};
std::string_view to_string(reuse_scope s) noexcept;

struct reuse_policy {
  reuse_mode mode = reuse_mode::store;
  reuse_scope scope = reuse_scope::user;
  double store_share = 0.5;             ///< of the store's limit that retained KV may hold
  std::uint32_t idle_ttl_s = 1800;      ///< retained KV unused this long is dropped; 0 = never
  std::uint32_t min_prefix_tokens = 64; ///< shorter KV is not kept, shorter matches not used

  friend bool operator==(const reuse_policy&, const reuse_policy&) = default;
};

} // namespace kvlane::actors
