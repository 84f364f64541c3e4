#include "actors/output_lengths.hpp"

#include <algorithm>

namespace kvlane::actors {

output_lengths::output_lengths(std::size_t window) : window_(std::max<std::size_t>(1, window)) {
  ring_.reserve(window_);
}

void output_lengths::observe(std::uint32_t generated) {
  if (ring_.size() < window_) {
    ring_.push_back(generated);
  } else {
    ring_[next_] = generated;
    next_ = (next_ + 1) % window_;
  }
  stale_ = true;
}

void output_lengths::sort_if_stale() const {
  if (!stale_)
    return;
  sorted_ = ring_;
  std::sort(sorted_.begin(), sorted_.end());
  suffix_.assign(sorted_.size() + 1, 0.0);
  for (std::size_t i = sorted_.size(); i-- > 0;)
    suffix_[i] = suffix_[i + 1] + sorted_[i];
  stale_ = false;
}

double output_lengths::expected_remaining(std::uint32_t generated, std::uint32_t max_tokens) const {
  if (generated >= max_tokens)
    return 0.0;
  const double cap = static_cast<double>(max_tokens - generated);
  sort_if_stale();
  const auto first = std::upper_bound(sorted_.begin(), sorted_.end(), generated) - sorted_.begin();
  const auto longer = sorted_.size() - static_cast<std::size_t>(first);
  double remaining = 0;
  if (longer == 0) {
    remaining = std::max(1.0, static_cast<double>(generated));
  } else {
    const double sum = suffix_[static_cast<std::size_t>(first)];
    remaining = sum / static_cast<double>(longer) - static_cast<double>(generated);
  }
  return std::clamp(remaining, 1.0, cap);
}

} // namespace kvlane::actors
