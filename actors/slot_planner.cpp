#include "actors/slot_planner.hpp"

#include <algorithm>
#include <vector>

namespace kvlane::actors {

std::string_view to_string(kv_state s) noexcept {
  switch (s) {
    case kv_state::queued: return "queued";
    case kv_state::resident: return "resident";
    case kv_state::dumping: return "dumping";
    case kv_state::parked: return "parked";
    case kv_state::loading: return "loading";
  }
  return "unknown";
}

std::string_view to_string(eviction e) noexcept {
  switch (e) {
    case eviction::swap: return "swap";
    case eviction::recompute: return "recompute";
  }
  return "unknown";
}

namespace {

class planner {
public:
  planner(const slot_plan_input& in, slot_actions& actions)
    : seqs_(in.ranked.begin(), in.ranked.end()), actions_(actions),
      preemptive_(in.preemptive), pending_(in.transfers_pending), promised_(in.dumping) {
    free_.reserve(in.owners.size());
    for (auto& owner : in.owners)
      free_.push_back(!owner.has_value());
    const auto slots = static_cast<std::uint32_t>(free_.size());
    spare_ = slots == 0 ? 0 : std::min(in.spare_slots, slots - 1);
    target_size_ = plan_target_size(slots, in.spare_slots, preemptive_);
    for (const auto& c : seqs_)
      if (c.state == kv_state::resident || c.state == kv_state::loading)
        ends_ms_.push_back(c.expected_end_ms);
    std::sort(ends_ms_.begin(), ends_ms_.end());
  }

  void run() {
    admit_target();
    if (preemptive_)
      restore_spare();
  }

private:
  // Target sequences that hold no slot take a free one, a promised one, or
  // one a victim leaves.
  void admit_target() {
    for (std::size_t i = 0; i < seqs_.size() && i < target_size_; ++i) {
      auto& s = seqs_[i];
      if (s.state != kv_state::queued && s.state != kv_state::parked)
        continue;
      auto slot = free_slot();
      if (!slot && promised_ > 0) {
        --promised_;
        continue;
      }
      if (!slot && preemptive_) {
        if (!waiter_)
          waiter_ = i;
        // A dump queued behind other transfers would hold its slot idle:
        // the victim keeps computing until the lane is free.
        auto* victim = pick_victim(&s, end_for_waiter(waiting_++));
        if (victim && (pending_ == 0 || victim->recompute_cheaper))
          evict(*victim); // a recompute frees the slot at once, a dump later
        slot = free_slot();
      }
      if (slot)
        admit(s, *slot);
    }
  }

  // Restores the spare slots while the lane that would dump a victim is idle:
  // until then the victims keep computing.
  void restore_spare() {
    while (free_slots() + promised_ < spare_) {
      // A target sequence left waiting would take the spare next: the same
      // rule as for its own victim. Otherwise only the victim's end can veto.
      auto* victim = waiter_ ? pick_victim(&seqs_[*waiter_], end_for_waiter(0))
                             : pick_victim(nullptr, preemption_case::unknown);
      if (!victim)
        break;
      if (pending_ > 0 && !victim->recompute_cheaper)
        break;
      evict(*victim);
      promised_ += victim->state == kv_state::dumping;
    }
  }

  // Without an eviction, the k-th target sequence left without a slot gets
  // the k-th slot expected to free.
  double end_for_waiter(std::size_t k) const {
    return k < ends_ms_.size() ? ends_ms_[k] : preemption_case::unknown;
  }

  // The lowest-ranked resident outside the target, not in the step, whose
  // eviction pays for `waiter` (null: restoring the spare for no one)
  // against waiting `wait_avoided_ms` for a slot.
  slot_candidate* pick_victim(const slot_candidate* waiter, double wait_avoided_ms) {
    for (std::size_t i = seqs_.size(); i-- > target_size_;) {
      auto& s = seqs_[i];
      if (s.state != kv_state::resident || s.in_step)
        continue;
      if (preemption_pays(eviction_case(waiter, s, wait_avoided_ms)))
        return &s;
    }
    return nullptr;
  }

  static preemption_case eviction_case(const slot_candidate* waiter, const slot_candidate& victim,
                                       double wait_avoided_ms) {
    preemption_case c{victim.eviction_ms, victim.expected_end_ms, victim.end_at_most_ms,
                      wait_avoided_ms};
    c.others_delay_ms = victim.others_delay_ms;
    c.victim_slack_ms = victim.slack_ms;
    c.victim_preempted_before = victim.preempted_before;
    if (waiter) {
      c.waiter_service_ms = waiter->service_ms;
      c.waiter_slack_ms = waiter->slack_ms;
      c.waiter_outranks = waiter->cls == priority_class::interactive
                          && victim.cls == priority_class::batch;
    }
    return c;
  }

  void evict(slot_candidate& s) {
    const auto slot = *s.slot;
    s.state = actions_.evict(s.id, s.recompute_cheaper ? eviction::recompute : eviction::swap);
    if (s.state == kv_state::dumping) {
      ++pending_;
      return;
    }
    free_[slot] = true;
    s.slot.reset();
  }

  void admit(slot_candidate& s, slot_id slot) {
    s.state = actions_.admit(s.id, slot);
    s.slot = slot;
    free_[slot] = false;
    pending_ += s.state == kv_state::loading;
  }

  std::optional<slot_id> free_slot() const {
    auto it = std::find(free_.begin(), free_.end(), true);
    if (it == free_.end())
      return std::nullopt;
    return static_cast<slot_id>(it - free_.begin());
  }

  std::uint32_t free_slots() const {
    return static_cast<std::uint32_t>(std::count(free_.begin(), free_.end(), true));
  }

  std::vector<slot_candidate> seqs_;
  slot_actions& actions_;
  std::vector<bool> free_;
  bool preemptive_;
  std::uint32_t pending_;
  std::uint32_t promised_;
  std::uint32_t spare_ = 0;
  std::size_t target_size_ = 0;
  std::vector<double> ends_ms_; ///< the residents' expected ends, soonest first
  std::size_t waiting_ = 0;             ///< target sequences that found no slot to take
  std::optional<std::size_t> waiter_;   ///< the first of them
};

} // namespace

std::uint32_t plan_spare(std::size_t slots, std::uint32_t spare_slots, bool preemptive) noexcept {
  if (!preemptive || slots == 0)
    return 0;
  return static_cast<std::uint32_t>(std::min<std::size_t>(spare_slots, slots - 1));
}

std::size_t plan_target_size(std::size_t slots, std::uint32_t spare_slots,
                             bool preemptive) noexcept {
  if (slots == 0)
    return 0;
  return slots - plan_spare(slots, spare_slots, preemptive);
}

void plan_slots(const slot_plan_input& in, slot_actions& actions) {
  planner{in, actions}.run();
}

} // namespace kvlane::actors
