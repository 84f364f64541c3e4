#include "actors/constrained_decoding.hpp"

#include <algorithm>
#include <bit>
#include <cmath>

namespace kvlane::actors {

namespace {

void clear_bit(std::vector<std::uint64_t>& bits, std::uint32_t id) noexcept {
  bits[id >> 6] &= ~(std::uint64_t{1} << (id & 63));
}

} // namespace

// -- trigger_table ---------------------------------------------------------------------

trigger_table::trigger_table(std::vector<std::string> triggers, const grammar::vocabulary& v)
  : triggers_(std::move(triggers)) {
  partial_.resize(triggers_.size());
  for (std::size_t t = 0; t < triggers_.size(); ++t) {
    longest_ = std::max(longest_, triggers_[t].size());
    partial_[t].resize(triggers_[t].size());
  }
  for (std::uint32_t id = 0; id < v.size(); ++id) {
    const auto b = v.bytes(id);
    if (b.empty())
      continue;
    bool holds_whole = false;
    for (std::size_t t = 0; t < triggers_.size(); ++t) {
      const std::string_view trig = triggers_[t];
      holds_whole = holds_whole || b.find(trig) != std::string_view::npos;
      for (std::size_t j = 1; j < trig.size(); ++j)
        if (b.starts_with(trig.substr(j)))
          partial_[t][j].push_back(id);
    }
    if (holds_whole)
      whole_.push_back(id);
  }
}

std::optional<std::size_t> trigger_table::first_in(std::string_view text, std::size_t from) const {
  std::optional<std::size_t> best;
  for (const auto& trig : triggers_) {
    const auto at = text.find(trig, from);
    if (at != std::string_view::npos && (!best || at < *best))
      best = at;
  }
  return best;
}

// -- mask_figures ----------------------------------------------------------------------

void mask_figures::observe(double us, bool during_a_step) noexcept {
  ++(during_a_step ? during_step : at_sampling);
  total_ms += us / 1000.0;
  max_ms = std::max(max_ms, us / 1000.0);
  std::size_t k = 0;
  if (us >= 1.0)
    k = std::min<std::size_t>(buckets - 1, static_cast<std::size_t>(2.0 * std::log2(us)));
  ++histogram[k];
}

double mask_figures::quantile_us(double q) const noexcept {
  const auto n = count();
  if (n == 0)
    return 0;
  const auto want = static_cast<std::uint64_t>(std::ceil(std::clamp(q, 0.0, 1.0) * static_cast<double>(n)));
  std::uint64_t seen = 0;
  for (std::size_t k = 0; k < buckets; ++k) {
    seen += histogram[k];
    if (seen >= std::max<std::uint64_t>(want, 1))
      return std::exp2(static_cast<double>(k + 1) / 2.0);
  }
  return std::exp2(static_cast<double>(buckets) / 2.0);
}

// -- constrained_output ----------------------------------------------------------------

constrained_output::constrained_output(constraint_setup setup) : setup_(std::move(setup)) {
  bits_.resize(setup_.vocabulary->words());
  if (!setup_.triggers)
    matcher_.emplace(setup_.constraint->grammar);
  else
    scratch_.emplace(setup_.constraint->grammar);
}

bool constrained_output::is_end(backends::token_id t) const noexcept {
  if (!active())
    return false;
  const auto ends = setup_.vocabulary->end_tokens();
  return std::find(ends.begin(), ends.end(), t) != ends.end();
}

void constrained_output::prepare_mask() {
  if (mask_ready())
    return;
  mask_version_ = version_;
  stuck_ = false;
  if (!active()) {
    fill_free_mask();
    return;
  }
  masked_ = true;
  setup_.masks->fill(*matcher_, bits_);
  stuck_ = std::all_of(bits_.begin(), bits_.end(), [](std::uint64_t w) { return w == 0; });
}

std::span<const std::uint64_t> constrained_output::mask() {
  prepare_mask();
  return masked_ ? std::span<const std::uint64_t>{bits_} : std::span<const std::uint64_t>{};
}

bool constrained_output::stuck() {
  prepare_mask();
  return stuck_;
}

// Free text: only tokens that would complete a trigger can break the grammar, and only when
// the text ends with a trigger's beginning (or the token holds a whole trigger). Each such
// token is run through a fresh matcher from the trigger on; the mask excludes those rejected.
// A token holding a whole trigger is judged without the text (its first trigger occurrence
// starts inside it, unless it also completes one begun in the text: then it is on a
// `completing` list too and checked with the text), so those verdicts are taken once.
void constrained_output::fill_free_mask() {
  const auto& table = *setup_.triggers;
  const auto& vocab = *setup_.vocabulary;
  std::string joined;
  auto rejects = [&](std::string_view tail, std::uint32_t id) {
    joined.assign(tail);
    joined.append(vocab.bytes(id));
    const auto at = table.first_in(joined, 0);
    if (!at)
      return false; // not reachable: the token was listed as completing a trigger here
    scratch_->rollback_to(0);
    return !scratch_->feed(std::string_view{joined}.substr(*at));
  };
  if (!whole_rejected_) {
    whole_rejected_.emplace();
    for (auto id : table.whole())
      if (rejects({}, id))
        whole_rejected_->push_back(id);
  }
  const std::size_t keep = table.longest() > 0 ? table.longest() - 1 : 0;
  const std::string_view tail =
    std::string_view{text_}.substr(text_.size() - std::min(text_.size(), keep));
  std::vector<std::uint32_t> rejected;
  std::vector<std::uint32_t> accepted; ///< checked with the text: their verdict stands
  for (std::size_t t = 0; t < table.triggers().size(); ++t) {
    const std::string_view trig = table.triggers()[t];
    for (std::size_t j = 1; j < trig.size(); ++j)
      if (tail.ends_with(trig.substr(0, j)))
        for (auto id : table.completing(t, j))
          (rejects(tail, id) ? rejected : accepted).push_back(id);
  }
  for (auto id : *whole_rejected_)
    if (std::find(accepted.begin(), accepted.end(), id) == accepted.end())
      rejected.push_back(id);
  masked_ = !rejected.empty();
  if (!masked_)
    return;
  std::fill(bits_.begin(), bits_.end(), ~std::uint64_t{0});
  if (const auto spare = bits_.size() * 64 - vocab.size(); spare > 0)
    bits_.back() >>= spare; // no bits past the vocabulary
  for (auto id : rejected)
    clear_bit(bits_, id);
}

std::size_t constrained_output::scan_from(std::size_t before) const noexcept {
  // A trigger completed by the newest bytes starts at most longest-1 bytes before them.
  const std::size_t back = setup_.triggers->longest() > 0 ? setup_.triggers->longest() - 1 : 0;
  return before - std::min(before, back);
}

constrained_output::outcome constrained_output::advance(backends::token_id t) {
  ++version_;
  const auto bytes = t < setup_.vocabulary->size() ? setup_.vocabulary->bytes(t) : std::string_view{};
  const std::size_t before = text_.size();
  text_.append(bytes);
  ends_.push_back(static_cast<std::uint32_t>(text_.size()));
  if (active()) {
    if (!matcher_->feed(bytes))
      return outcome::broken;
  } else {
    const auto at = setup_.triggers->first_in(text_, scan_from(before));
    if (!at)
      return outcome::more;
    trigger_at_ = *at;
    activated_after_ = ends_.size();
    matcher_.emplace(setup_.constraint->grammar);
    if (!matcher_->feed(std::string_view{text_}.substr(trigger_at_)))
      return outcome::broken;
  }
  if (setup_.constraint->end_when_complete && matcher_->can_end() && !matcher_->can_continue())
    return outcome::complete;
  return outcome::more;
}

void constrained_output::rollback(std::size_t generated) {
  if (generated >= ends_.size())
    return;
  ++version_;
  ends_.resize(generated);
  text_.resize(generated == 0 ? 0 : ends_.back());
  if (setup_.triggers && generated < activated_after_) {
    // The trigger is no longer complete in the kept text: free again.
    matcher_.reset();
    trigger_at_ = 0;
    activated_after_ = 0;
    return;
  }
  if (matcher_)
    matcher_->rollback_to(text_.size() - trigger_at_);
}

} // namespace kvlane::actors
