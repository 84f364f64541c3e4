#include "actors/sequence_table.hpp"

#include "actors/kv_keeper.hpp"

namespace kvlane::actors {

sequence_table::sequence_table(rank_order order, std::uint32_t slots)
  : owners_(slots), ranks_(order) {}

sequence& sequence_table::add(std::unique_ptr<sequence> s, std::string_view fairness_unit) {
  auto& seq = *s;
  ranks_.insert(seq.id, seq.position, fairness_unit);
  aging_.enter(seq.id, seq.position.level > 0 || seq.position.demoted);
  ++counts_[static_cast<std::size_t>(seq.state)][static_cast<std::size_t>(seq.position.cls)];
  seqs_.emplace(seq.id, std::move(s));
  count_top(seq, seq.position, +1);
  note_head(seq);
  return seq;
}

void sequence_table::count_top(const sequence& s, const mlfq_position& p, int sign) {
  if (p.demoted || p.level != 0 || (s.state != kv_state::queued && s.state != kv_state::parked)
      || !ranks_.contains(s.id))
    return;
  auto& n = top_waiting_[static_cast<std::size_t>(p.cls)];
  n = sign > 0 ? n + 1 : n - 1;
}

void sequence_table::erase(seq_id id) {
  const auto it = seqs_.find(id);
  if (it == seqs_.end())
    return;
  const auto& s = *it->second;
  unrank(s);
  --counts_[static_cast<std::size_t>(s.state)][static_cast<std::size_t>(s.position.cls)];
  seqs_.erase(it);
}

sequence* sequence_table::find(seq_id id) const {
  const auto it = seqs_.find(id);
  return it == seqs_.end() ? nullptr : it->second.get();
}

std::vector<seq_id> sequence_table::ids() const {
  std::vector<seq_id> out;
  out.reserve(seqs_.size());
  for (const auto& [id, s] : seqs_)
    out.push_back(id);
  return out;
}

void sequence_table::set_state(sequence& s, kv_state state) {
  const auto cls = static_cast<std::size_t>(s.position.cls);
  count_top(s, s.position, -1);
  --counts_[static_cast<std::size_t>(s.state)][cls];
  s.state = state;
  ++counts_[static_cast<std::size_t>(state)][cls];
  count_top(s, s.position, +1);
}

void sequence_table::take_slot(sequence& s, slot_id slot) {
  owners_[slot] = s.id;
  s.slot = slot;
  ++grants_;
}

void sequence_table::note_first_slot(const sequence& s, std::chrono::steady_clock::time_point now) {
  if (s.generated > 0)
    return; // a run coming back, not a first slot
  first_waits_[static_cast<std::size_t>(s.position.cls)].observe(
    std::chrono::duration<double, std::milli>(now - s.arrived).count());
}

void sequence_table::release_slot(sequence& s) {
  if (s.slot) {
    owners_[*s.slot].reset();
    s.slot.reset();
  }
}

std::vector<sequence*> sequence_table::slot_holders() const {
  std::vector<sequence*> out;
  for (const auto& owner : owners_)
    if (owner)
      if (auto* s = find(*owner))
        out.push_back(s);
  return out;
}

void sequence_table::moved(sequence& s, const mlfq_position& before) {
  if (s.position.level == before.level && s.position.turn == before.turn
      && s.position.demoted == before.demoted)
    return; // most steps: same place
  count_top(s, before, -1);
  count_top(s, s.position, +1);
  ranks_.update(s.id, s.position);
  aging_.set_above_top(s.id, s.position.level > 0 || s.position.demoted);
}

void sequence_table::unrank(const sequence& s) {
  count_top(s, s.position, -1);
  ranks_.erase(s.id);
  aging_.leave(s.id);
  demotions_.forget(s.id);
  if (s.head)
    by_head_.erase({*s.head, s.id});
}

void sequence_table::note_head(sequence& s) {
  if (s.head || s.cancelled)
    return;
  s.head = reuse_head_of(s.tokens);
  if (s.head)
    by_head_.emplace(*s.head, s.id);
}

void sequence_table::age(std::uint32_t aging_steps) {
  std::vector<seq_id> residents;
  for (auto* s : slot_holders())
    if (s->state == kv_state::resident)
      residents.push_back(s->id);
  for (auto id : aging_.step(residents, aging_steps)) {
    auto* s = find(id);
    if (!s)
      continue;
    const auto before = s->position;
    mlfq_policy::return_to_top(s->position);
    count_top(*s, before, -1);
    count_top(*s, s->position, +1);
    ranks_.update(id, s->position);
  }
}

void sequence_table::watch_demotion(const sequence& s, demotion_queue::time_point at) {
  if (ranks_.contains(s.id))
    demotions_.watch(s.id, at);
}

std::vector<sequence*> sequence_table::due_for_demotion(demotion_queue::time_point now) {
  std::vector<sequence*> out;
  for (auto id : demotions_.due(now)) {
    auto* s = find(id);
    if (s && ranks_.contains(id) && s->generated == 0 && !s->position.demoted)
      out.push_back(s);
  }
  return out;
}

void sequence_table::demote(sequence& s) {
  const auto before = s.position;
  s.position.demoted = true;
  moved(s, before);
}

std::vector<sequence*> sequence_table::best_ranked(std::size_t n) const {
  std::vector<sequence*> out;
  for (auto id : ranks_.best(n))
    out.push_back(find(id));
  return out;
}

std::vector<sequence*>
sequence_table::residents_in_rank_order(const std::vector<sequence*>& top) const {
  std::vector<seq_id> ids;
  for (auto* s : slot_holders())
    if (s->state == kv_state::resident && !s->cancelled
        && std::find(top.begin(), top.end(), s) == top.end())
      ids.push_back(s->id);
  ranks_.sort(ids);
  std::vector<sequence*> out;
  for (auto id : ids)
    out.push_back(find(id));
  return out;
}

} // namespace kvlane::actors
