#include "actors/sampler.hpp"

#include "common/random.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <limits>
#include <utility>

namespace kvlane::actors {

namespace {

constexpr float neg_inf = -std::numeric_limits<float>::infinity();

// NaN can never win; +inf becomes the largest finite value so that
// `logit - max` stays well defined (inf - inf would be NaN).
float clean(float x) noexcept {
  if (std::isnan(x))
    return neg_inf;
  if (x == std::numeric_limits<float>::infinity())
    return std::numeric_limits<float>::max();
  return x;
}

// NaN compares false, so it never replaces the best; +inf beats any finite.
backends::token_id argmax(std::span<const float> logits) noexcept {
  std::size_t best = 0;
  float best_v = neg_inf;
  for (std::size_t i = 0; i < logits.size(); ++i) {
    const float v = logits[i];
    if (v > best_v) {
      best_v = v;
      best = i;
    }
  }
  return static_cast<backends::token_id>(best);
}

bool is_banned(std::span<const backends::token_id> banned, std::size_t t) noexcept {
  return std::binary_search(banned.begin(), banned.end(), static_cast<backends::token_id>(t));
}

// The argmax of the allowed tokens that are not banned (lowest id on ties; the lowest such id
// when none has a finite logit), as argmax() of the row with the others at -inf would give it.
backends::token_id argmax_allowed(std::span<const float> logits, std::span<const std::uint64_t> allowed,
                                  std::span<const backends::token_id> banned) noexcept {
  const std::size_t n = std::min(logits.size(), allowed.size() * 64);
  std::optional<std::size_t> best;
  float best_v = neg_inf;
  for (std::size_t w = 0; w * 64 < n; ++w) {
    for (std::uint64_t bits = allowed[w]; bits != 0; bits &= bits - 1) {
      const std::size_t i = w * 64 + static_cast<std::size_t>(std::countr_zero(bits));
      if (i >= n)
        break;
      if ((!best || logits[i] > best_v) && !is_banned(banned, i)) {
        best = i;
        best_v = std::isnan(logits[i]) ? neg_inf : logits[i];
      }
    }
  }
  return static_cast<backends::token_id>(best.value_or(0));
}

// argmax() over the tokens that are not banned (lowest id on ties; 0 when none is finite).
backends::token_id argmax_except(std::span<const float> logits,
                                 std::span<const backends::token_id> banned) noexcept {
  std::size_t best = 0;
  float best_v = neg_inf;
  for (std::size_t i = 0; i < logits.size(); ++i) {
    const float v = logits[i];
    if (v > best_v && !is_banned(banned, i)) { // a new best is rare: the lookup is too
      best_v = v;
      best = i;
    }
  }
  return static_cast<backends::token_id>(best);
}

// Strict total order on token ids: higher value first, lower index breaks
// ties. With it, nth_element/sort/heap results do not depend on the standard
// library implementation.
struct ranks_before {
  const float* v;
  bool operator()(std::uint32_t a, std::uint32_t b) const noexcept {
    return v[a] > v[b] || (v[a] == v[b] && a < b);
  }
};

// Bands of 1/16 nat of log-probability; below -104 nats expf gives 0 in
// float, so everything deeper shares the last band.
constexpr std::size_t bucket_scale = 16;
constexpr std::size_t bucket_depth = 104;
constexpr std::size_t bucket_count = bucket_depth * bucket_scale + 1;

std::size_t bucket_of(float scaled) noexcept {
  const float depth = -scaled; // scaled <= 0
  if (!(depth < static_cast<float>(bucket_depth)))
    return bucket_count - 1;
  return static_cast<std::size_t>(depth * static_cast<float>(bucket_scale));
}

} // namespace

expected<void, std::string> validate(const sampling_params& p, std::uint32_t vocab_size,
                                     std::uint32_t max_context) {
  if (!std::isfinite(p.temperature) || p.temperature < 0.0f || p.temperature > max_temperature)
    return unexpected(fmt::format("temperature must be finite and in [0, {}], got {}",
                                  max_temperature, p.temperature));
  if (!(p.top_p > 0.0f && p.top_p <= 1.0f))
    return unexpected(fmt::format("top_p must be in (0, 1], got {}", p.top_p));
  if (p.top_k > vocab_size)
    return unexpected(
        fmt::format("top_k must be <= vocab_size ({}), got {}", vocab_size, p.top_k));
  if (p.max_tokens < 1 || p.max_tokens > max_context)
    return unexpected(fmt::format("max_tokens must be in [1, max_context ({})], got {}",
                                  max_context, p.max_tokens));
  for (auto [name, v] : {std::pair{"presence_penalty", p.presence_penalty},
                         std::pair{"frequency_penalty", p.frequency_penalty}})
    if (!std::isfinite(v) || v < -max_penalty || v > max_penalty)
      return unexpected(fmt::format("{} must be in [-{}, {}], got {}", name, max_penalty,
                                    max_penalty, v));
  if (p.stop_tokens.size() > max_stop_tokens)
    return unexpected(fmt::format("stop_tokens holds {} entries, at most {} allowed",
                                  p.stop_tokens.size(), max_stop_tokens));
  if (p.top_logprobs > max_top_logprobs)
    return unexpected(fmt::format("top_logprobs must be <= {}, got {}", max_top_logprobs,
                                  p.top_logprobs));
  if (p.top_logprobs > 0 && !p.logprobs)
    return unexpected(fmt::format("top_logprobs ({}) needs logprobs", p.top_logprobs));
  for (std::size_t i = 0; i < p.stop_tokens.size(); ++i)
    if (p.stop_tokens[i] >= vocab_size)
      return unexpected(fmt::format("stop_tokens[{}] must be < vocab_size ({}), got {}", i,
                                    vocab_size, p.stop_tokens[i]));
  if (p.banned_tokens.size() > max_banned_tokens)
    return unexpected(fmt::format("banned_tokens holds {} entries, at most {} allowed",
                                  p.banned_tokens.size(), max_banned_tokens));
  for (std::size_t i = 0; i < p.banned_tokens.size(); ++i)
    if (p.banned_tokens[i] >= vocab_size)
      return unexpected(fmt::format("banned_tokens[{}] must be < vocab_size ({}), got {}", i,
                                    vocab_size, p.banned_tokens[i]));
  return {};
}

sampler::sampler(sampling_params params)
  : params_(std::move(params)), banned_(params_.banned_tokens) {
  std::sort(banned_.begin(), banned_.end());
  banned_.erase(std::unique(banned_.begin(), banned_.end()), banned_.end());
  state_.rng = xoshiro256_seed(params_.seed);
}

bool sampler::is_stop(backends::token_id t) const noexcept {
  return std::find(params_.stop_tokens.begin(), params_.stop_tokens.end(), t)
         != params_.stop_tokens.end();
}

std::uint64_t sampler::next_u64() noexcept {
  ++state_.draws;
  return xoshiro256_next(state_.rng);
}

double sampler::next_unit() noexcept {
  return unit_double(next_u64()); // [0, 1)
}

backends::token_id sampler::sample(std::span<const float> logits) {
  return sample(logits, {});
}

std::span<const float> sampler::masked(std::span<const float> logits,
                                       std::span<const std::uint64_t> allowed,
                                       std::optional<backends::token_id>& forced) {
  if (allowed.empty()) { // banned tokens only: the row as it is, without them
    masked_.assign(logits.begin(), logits.end());
    for (const auto t : banned_)
      if (t < masked_.size())
        masked_[t] = neg_inf;
    return masked_;
  }
  masked_.assign(logits.size(), neg_inf);
  const std::size_t n = std::min(logits.size(), allowed.size() * 64);
  std::optional<backends::token_id> first;
  bool any_finite = false;
  for (std::size_t w = 0; w * 64 < n; ++w) {
    for (std::uint64_t bits = allowed[w]; bits != 0; bits &= bits - 1) {
      const std::size_t i = w * 64 + static_cast<std::size_t>(std::countr_zero(bits));
      if (i >= n)
        break;
      if (!banned_.empty() && is_banned(banned_, i))
        continue;
      if (!first)
        first = static_cast<backends::token_id>(i);
      masked_[i] = logits[i];
      any_finite = any_finite || clean(logits[i]) != neg_inf;
    }
  }
  if (!any_finite)
    forced = first;
  return masked_;
}

backends::token_id sampler::sample(std::span<const float> logits,
                                   std::span<const std::uint64_t> allowed) {
  if (params_.token_limit != 0 && logits.size() > params_.token_limit)
    logits = logits.first(params_.token_limit);
  const float temperature = params_.temperature;
  const bool greedy =
    !(temperature > 0.0f) || !std::isfinite(temperature) || !std::isfinite(1.0f / temperature);
  const bool plain_greedy = greedy && !params_.logprobs && params_.presence_penalty == 0.0f
                            && params_.frequency_penalty == 0.0f;
  if (!allowed.empty() && plain_greedy)
    return argmax_allowed(logits, allowed, banned_); // the masked row's argmax, without copying it
  if (allowed.empty() && plain_greedy && !banned_.empty())
    return argmax_except(logits, banned_); // likewise without the banned tokens
  std::optional<backends::token_id> forced;
  if (!allowed.empty() || !banned_.empty())
    logits = masked(logits, allowed, forced);
  if (forced && !greedy) {
    // Only tokens the model rules out are allowed (a complete grammar's end token): take the
    // first, with the draw a non-greedy call makes, so the stream position stays per token.
    (void)next_unit();
  }
  if (params_.presence_penalty == 0.0f && params_.frequency_penalty == 0.0f) {
    const auto t = forced ? *forced : pick(logits);
    if (params_.logprobs)
      logprobs_ = log_probabilities(logits, params_.temperature, t, params_.top_logprobs);
    return t;
  }
  const auto row = penalised(logits);
  const auto t = forced ? *forced : pick(row);
  if (params_.logprobs)
    logprobs_ = log_probabilities(row, params_.temperature, t, params_.top_logprobs);
  auto it = std::lower_bound(counts_.begin(), counts_.end(), t,
                             [](const auto& e, backends::token_id v) { return e.first < v; });
  if (it != counts_.end() && it->first == t)
    ++it->second;
  else
    counts_.insert(it, {t, 1});
  return t;
}

std::span<const float> sampler::penalised(std::span<const float> logits) {
  penalised_.assign(logits.begin(), logits.end());
  for (const auto& [t, c] : counts_)
    if (t < penalised_.size())
      penalised_[t] -= params_.presence_penalty + static_cast<float>(c) * params_.frequency_penalty;
  return penalised_;
}

backends::token_id sampler::pick(std::span<const float> logits) {
  const std::size_t n = logits.size();
  if (n == 0)
    return 0;
  const float temperature = params_.temperature;
  const float inv_t = 1.0f / temperature;
  if (!(temperature > 0.0f) || !std::isfinite(temperature) || !std::isfinite(inv_t))
    return argmax(logits);

  // One draw per call whatever the row looks like, so the stream position
  // depends only on how many tokens were sampled.
  const double u = next_unit();

  scaled_.resize(n);
  probs_.resize(n);
  order_.resize(n);
  buckets_.resize(bucket_count);

  float* const s = scaled_.data();
  float max_v = neg_inf;
  for (std::size_t i = 0; i < n; ++i) {
    s[i] = clean(logits[i]);
    max_v = std::max(max_v, s[i]);
  }
  if (max_v == neg_inf)
    return 0;

  const std::size_t k = params_.top_k;
  if (k > 0 && k <= n / 8)
    return sample_few(k, max_v, inv_t, u);
  for (std::size_t i = 0; i < n; ++i)
    s[i] = (s[i] - max_v) * inv_t; // -inf stays -inf
  return sample_all(k < n ? k : 0, u);
}

// Small top-k: one scan with a k-element heap (almost every token fails the
// comparison with the heap's worst), then only k exponentials.
backends::token_id sampler::sample_few(std::size_t k, float max_v, float inv_t,
                                       double u) noexcept {
  const std::size_t n = scaled_.size();
  const float* const s = scaled_.data();
  float* const p = probs_.data();
  std::uint32_t* const ord = order_.data();
  const ranks_before before{s};

  std::size_t c = 0;
  for (std::size_t i = 0; i < n; ++i) {
    const auto id = static_cast<std::uint32_t>(i);
    if (s[i] == neg_inf)
      continue;
    if (c < k) {
      ord[c++] = id;
      std::push_heap(ord, ord + c, before); // front: the worst kept token
    } else if (before(id, ord[0])) {
      std::pop_heap(ord, ord + c, before);
      ord[c - 1] = id;
      std::push_heap(ord, ord + c, before);
    }
  }
  std::sort(ord, ord + c, before);

  double total = 0.0;
  for (std::size_t j = 0; j < c; ++j) {
    p[j] = std::exp((s[ord[j]] - max_v) * inv_t); // p indexed by rank here
    total += p[j];
  }
  std::size_t kept = c;
  double mass = total;
  if (params_.top_p < 1.0f) {
    const double goal = static_cast<double>(params_.top_p) * total;
    double cum = 0.0;
    for (std::size_t j = 0; j < c; ++j) {
      cum += p[j];
      if (cum >= goal) {
        kept = j + 1;
        mass = cum;
        break;
      }
    }
  }

  const double target = u * mass;
  double acc = 0.0;
  for (std::size_t j = 0; j < kept; ++j) {
    acc += p[j];
    if (acc > target)
      return ord[j];
  }
  return ord[0]; // only reachable if u * mass rounded up to mass
}

// Everything else works on the whole row in index order: scaled_ holds
// (logit - max) / temperature, and the sums run in a fixed order.
backends::token_id sampler::sample_all(std::size_t k, double u) noexcept {
  const std::size_t n = scaled_.size();
  float* const s = scaled_.data();
  float* const p = probs_.data();
  std::uint32_t* const ord = order_.data();
  const ranks_before before{s};

  // Large top-k: find the k-th token, then membership is "ranked no lower".
  float bound_v = neg_inf;
  std::size_t bound_i = n;
  if (k > 0) {
    std::size_t live = 0;
    for (std::size_t i = 0; i < n; ++i)
      if (s[i] > neg_inf)
        ord[live++] = static_cast<std::uint32_t>(i);
    if (k < live) {
      std::nth_element(ord, ord + k - 1, ord + live, before);
      bound_i = ord[k - 1];
      bound_v = s[bound_i];
    }
  }

  double total = 0.0;
  for (std::size_t i = 0; i < n; ++i) {
    const float v = s[i];
    const bool member = v > neg_inf && (v > bound_v || (v == bound_v && i <= bound_i));
    p[i] = member ? std::exp(v) : 0.0f;
    total += p[i];
  }

  if (params_.top_p < 1.0f) { // NaN compares false: off
    // Nucleus without a full sort: histogram the mass by log-probability band,
    // find the band where the cumulative mass crosses top_p, and rank only the
    // tokens of that band. Every token in a higher band is in the nucleus.
    double* const band = buckets_.data();
    std::fill(band, band + bucket_count, 0.0);
    for (std::size_t i = 0; i < n; ++i)
      if (p[i] > 0.0f)
        band[bucket_of(s[i])] += p[i];

    const double goal = static_cast<double>(params_.top_p) * total;
    double above = 0.0;
    std::size_t cut = 0;
    while (cut < bucket_count && above + band[cut] < goal)
      above += band[cut++];

    if (cut < bucket_count) {
      std::size_t c = 0;
      for (std::size_t i = 0; i < n; ++i)
        if (p[i] > 0.0f && bucket_of(s[i]) == cut)
          ord[c++] = static_cast<std::uint32_t>(i);

      // Rank the band in growing chunks: usually the first chunk suffices.
      const double goal_in_band = goal - above;
      double cum = 0.0;
      std::size_t sorted = 0;
      std::size_t last = c; // rank of the last nucleus token in the band
      while (last == c && sorted < c) {
        const std::size_t end = std::min(c, std::max<std::size_t>(64, 2 * sorted));
        if (end < c)
          std::nth_element(ord + sorted, ord + end, ord + c, before);
        std::sort(ord + sorted, ord + end, before);
        for (std::size_t j = sorted; j < end; ++j) {
          cum += p[ord[j]];
          if (cum >= goal_in_band) {
            last = j;
            break;
          }
        }
        sorted = end;
      }
      if (last == c)
        last = c - 1; // rounding kept the band's sum just below the goal
      const std::uint32_t boundary = ord[last];

      total = 0.0;
      for (std::size_t i = 0; i < n; ++i) {
        if (p[i] > 0.0f) {
          const std::size_t b = bucket_of(s[i]);
          const bool kept =
              b < cut || (b == cut && !before(boundary, static_cast<std::uint32_t>(i)));
          if (!kept)
            p[i] = 0.0f;
        }
        total += p[i];
      }
    }
  }

  const double target = u * total;
  double acc = 0.0;
  std::size_t last_live = 0;
  for (std::size_t i = 0; i < n; ++i) {
    if (p[i] > 0.0f)
      last_live = i;
    acc += p[i];
    if (acc > target)
      return static_cast<backends::token_id>(i);
  }
  return static_cast<backends::token_id>(last_live); // u * total rounded up to total
}

token_logprobs log_probabilities(std::span<const float> logits, float temperature,
                                 backends::token_id chosen, std::uint32_t top_n) noexcept {
  token_logprobs out;
  out.chosen.token = chosen;
  top_n = std::min(top_n, max_top_logprobs);
  const double inv_t =
      temperature > 0.0f && std::isfinite(temperature) && std::isfinite(1.0f / temperature)
          ? 1.0 / static_cast<double>(temperature)
          : 1.0;

  float max_v = neg_inf;
  for (const float x : logits)
    max_v = std::max(max_v, clean(x));
  if (max_v == neg_inf)
    return out; // nothing can be drawn: every entry stays at min_logprob

  // One pass: the normalizer (fixed order, double) and the top_n best tokens
  // in a heap whose front is the worst kept one.
  auto* const top = out.top.data();
  const auto before = [](const token_logprob& a, const token_logprob& b) noexcept {
    return a.logprob > b.logprob || (a.logprob == b.logprob && a.token < b.token);
  };
  double total = 0.0;
  std::uint32_t kept = 0;
  for (std::size_t i = 0; i < logits.size(); ++i) {
    const float v = clean(logits[i]);
    if (v == neg_inf)
      continue;
    total += std::exp((static_cast<double>(v) - max_v) * inv_t);
    if (top_n == 0)
      continue;
    // Ranked by the cleaned logit: the same order as the probability.
    const token_logprob cand{static_cast<backends::token_id>(i), v};
    if (kept < top_n) {
      top[kept++] = cand;
      std::push_heap(top, top + kept, before);
    } else if (before(cand, top[0])) {
      std::pop_heap(top, top + kept, before);
      top[kept - 1] = cand;
      std::push_heap(top, top + kept, before);
    }
  }
  std::sort_heap(top, top + kept, before);
  out.top_count = kept;

  const double log_total = std::log(total); // total >= 1: the max contributes exp(0)
  const auto log_p = [&](float logit) noexcept {
    const float v = clean(logit);
    if (v == neg_inf)
      return min_logprob;
    const double lp = (static_cast<double>(v) - max_v) * inv_t - log_total;
    return static_cast<float>(std::clamp(lp, static_cast<double>(min_logprob), 0.0));
  };
  for (std::uint32_t j = 0; j < kept; ++j)
    top[j].logprob = log_p(logits[top[j].token]);
  if (chosen < logits.size())
    out.chosen.logprob = log_p(logits[chosen]);
  return out;
}

} // namespace kvlane::actors
