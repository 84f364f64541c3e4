#pragma once

// kvlane::actors::output_lengths — how many more tokens a running sequence is
// expected to generate, from the output lengths of the model's recent finished
// sequences.
//
// The estimate is the mean residual length of the window: for a sequence that
// has generated g tokens, the mean of (L - g) over the finished lengths L > g.
// With the heavy-tailed lengths of real traces it grows with g, so a long
// runner is not mistaken for one about to end. Where no finished length passes
// g (or nothing has finished yet) the sequence is as likely to run on as long
// again as it has run (g more tokens, at least one). Every estimate is capped
// by what max_tokens leaves.
//
// Pure: no clock. Memory: the last `window` lengths. Threading: one owner.

#include <cstddef>
#include <cstdint>
#include <vector>

namespace kvlane::actors {

class output_lengths {
public:
  static constexpr std::size_t default_window = 512;

  explicit output_lengths(std::size_t window = default_window);

  /// A sequence finished (stop token, stop string or max_tokens) after
  /// `generated` tokens. Cancelled and failed sequences are not observed.
  void observe(std::uint32_t generated);

  /// Expected further tokens of a sequence that has generated `generated` and
  /// may generate at most `max_tokens` in all: in [0, max_tokens - generated],
  /// and at least 1 while that is positive.
  double expected_remaining(std::uint32_t generated, std::uint32_t max_tokens) const;

  std::size_t size() const noexcept { return ring_.size(); }

private:
  void sort_if_stale() const;

  std::size_t window_;
  std::vector<std::uint32_t> ring_; ///< the last `window_` lengths, oldest at next_
  std::size_t next_ = 0;
  mutable std::vector<std::uint32_t> sorted_;
  mutable std::vector<double> suffix_; ///< suffix_[i] = sum of sorted_[i..]
  mutable bool stale_ = false;
};

} // namespace kvlane::actors
