#include "tools/bench/conversation_workload.hpp"

#include "tools/bench/block_prompt.hpp"

#include <algorithm>
#include <cmath>
#include <map>
#include <unordered_map>

namespace kvlane::tools::bench {

namespace {

std::uint64_t mix(std::uint64_t x) noexcept {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

// A conversation's key: its first non-system block, or (for a request with the
// system block alone) its own position, tagged so the two never collide.
struct conv_key {
  std::uint64_t value = 0;
  bool solo = false;
  friend bool operator==(const conv_key&, const conv_key&) = default;
};

conv_key key_of(const mooncake_request& r, std::size_t index) noexcept {
  return r.hash_ids.size() >= 2 ? conv_key{r.hash_ids[1], false} : conv_key{index, true};
}

struct conv_key_hash {
  std::size_t operator()(const conv_key& k) const noexcept {
    return static_cast<std::size_t>(mix(k.value ^ (k.solo ? 0x5157ull << 48 : 0)));
  }
};

std::uint32_t scaled(double x, double scale) {
  return static_cast<std::uint32_t>(std::max(1.0, std::round(x * scale)));
}

} // namespace

std::string_view to_string(trace_users u) noexcept {
  return u == trace_users::one ? "one" : "conversation";
}

std::optional<trace_users> parse_trace_users(std::string_view s) noexcept {
  if (s == "conversation")
    return trace_users::conversation;
  if (s == "one")
    return trace_users::one;
  return std::nullopt;
}

std::vector<std::uint32_t> conversation_ids(std::span<const mooncake_request> requests) {
  std::unordered_map<conv_key, std::uint32_t, conv_key_hash> ids;
  std::vector<std::uint32_t> out;
  out.reserve(requests.size());
  for (std::size_t i = 0; i < requests.size(); ++i) {
    auto [it, fresh] = ids.try_emplace(key_of(requests[i], i), static_cast<std::uint32_t>(ids.size()));
    out.push_back(it->second);
  }
  return out;
}

bool keep_conversation(std::uint64_t key, double fraction, std::uint64_t seed) noexcept {
  if (fraction >= 1.0)
    return true;
  // The top 53 bits of a hash of (seed, key) as a uniform draw in [0, 1).
  const std::uint64_t h = mix(mix(seed) ^ key);
  return static_cast<double>(h >> 11) * 0x1.0p-53 < fraction;
}

conversation_workload build_conversation_workload(std::span<const mooncake_request> requests,
                                                  const conversation_options& o) {
  conversation_workload w;
  w.block_tokens = scaled(mooncake_block_tokens, o.input_scale);
  const auto conv = conversation_ids(requests);
  std::vector<signed char> kept; // per conversation: -1 undecided, 0 dropped, 1 kept
  std::vector<std::int32_t> last_turn; // per conversation: its latest request so far, or -1
  std::optional<double> first_s;
  for (std::size_t i = 0; i < requests.size(); ++i) {
    const auto& m = requests[i];
    const auto c = conv[i];
    if (c >= kept.size()) {
      kept.resize(c + 1, -1);
      last_turn.resize(c + 1, -1);
      const auto key = key_of(m, i);
      // Solo requests draw on their position, in a separate stream of the seed.
      kept[c] = keep_conversation(key.value, o.sample, key.solo ? ~o.seed : o.seed) ? 1 : 0;
      w.kept_conversations += kept[c] == 1;
    }
    if (kept[c] != 1)
      continue;
    if (!first_s)
      first_s = m.arrival_s;
    trace_request r;
    r.arrival_s = m.arrival_s - *first_s;
    r.output_tokens = m.output_length;
    r.owner = o.users == trace_users::one ? 1 : std::uint64_t{c} + 1;
    r.conversation = c;
    r.previous_turn = last_turn[c];
    last_turn[c] = static_cast<std::int32_t>(w.requests.size());
    auto prompt = std::make_shared<std::vector<backends::token_id>>(
      block_prompt(m.hash_ids, w.block_tokens, scaled(m.input_length, o.input_scale)));
    r.prompt_tokens = static_cast<std::uint32_t>(std::max<std::size_t>(1, prompt->size()));
    r.prompt = std::move(prompt);
    w.requests.push_back(std::move(r));
  }
  w.conversations = kept.size();
  return w;
}

std::vector<std::uint32_t> achievable_reuse(std::span<const trace_request> requests,
                                            std::uint32_t min_prefix_tokens) {
  std::vector<std::uint32_t> out(requests.size(), 0);
  // By model and owner: a model's retained KV serves only its own requests.
  std::map<std::pair<std::uint32_t, std::uint64_t>, std::vector<std::size_t>> earlier;
  for (std::size_t i = 0; i < requests.size(); ++i) {
    const auto& r = requests[i];
    if (!r.prompt)
      continue;
    const auto len = std::min<std::size_t>(r.prompt_tokens, r.prompt->size());
    const auto* p = r.prompt->data();
    std::size_t best = 0;
    auto& seen = earlier[{r.model, r.owner}];
    for (auto j : seen) {
      const auto& q = requests[j];
      const auto qlen = std::min<std::size_t>(q.prompt_tokens, q.prompt->size());
      const auto n = std::min(len, qlen);
      const auto match =
        static_cast<std::size_t>(std::mismatch(p, p + n, q.prompt->data()).first - p);
      best = std::max(best, match);
    }
    seen.push_back(i);
    best = std::min(best, len > 0 ? len - 1 : 0);
    out[i] = best >= min_prefix_tokens ? static_cast<std::uint32_t>(best) : 0;
  }
  return out;
}

} // namespace kvlane::tools::bench
