#include "actors/rank_index.hpp"

#include <algorithm>

namespace kvlane::actors {

rank_index::group_key rank_index::key_of(const mlfq_position& p) const noexcept {
  switch (order_) {
    case rank_order::arrival: return {};
    case rank_order::priority: return {p.cls, 0};
    case rank_order::mlfq: return {p.cls, p.level};
  }
  return {};
}

std::string_view rank_index::bucket_of(std::string_view client) const noexcept {
  // Only mlfq interleaves clients; the other orders are by turn inside a group.
  return order_ == rank_order::mlfq ? client : std::string_view{};
}

bool rank_index::insert(seq_id id, const mlfq_position& position, std::string_view client) {
  if (members_.contains(id))
    return false;
  place(id, key_of(position), position.turn, bucket_of(client));
  return true;
}

bool rank_index::erase(seq_id id) {
  auto it = members_.find(id);
  if (it == members_.end())
    return false;
  remove(id, it->second);
  members_.erase(it);
  return true;
}

bool rank_index::update(seq_id id, const mlfq_position& position) {
  auto it = members_.find(id);
  if (it == members_.end())
    return false;
  const auto key = key_of(position);
  if (it->second.key == key && it->second.turn == position.turn)
    return true;
  const std::string client = it->second.client->first; // outlives the removal
  remove(id, it->second);
  members_.erase(it);
  place(id, key, position.turn, client);
  return true;
}

void rank_index::place(seq_id id, group_key key, std::uint64_t turn, std::string_view client) {
  auto& g = groups_[key];
  auto c = g.clients.find(std::string{client});
  if (c == g.clients.end())
    c = g.clients.emplace(std::string{client}, member_tree{}).first;
  auto& members = c->second;
  const member_key mk{turn, id};
  if (!members.empty() && mk < *members.begin())
    g.by_first.erase({*members.begin(), &members});
  members.insert(mk);
  if (*members.begin() == mk)
    g.by_first.emplace(mk, &members);
  members_.emplace(id, member{key, turn, &*c});
}

void rank_index::remove(seq_id id, const member& m) {
  auto git = groups_.find(m.key);
  auto& g = git->second;
  auto& members = m.client->second;
  const member_key mk{m.turn, id};
  const bool was_first = *members.begin() == mk;
  if (was_first)
    g.by_first.erase({mk, &members});
  members.erase(mk);
  if (members.empty()) {
    g.clients.erase(g.clients.find(m.client->first)); // by iterator: the key lives in the node
    if (g.clients.empty())
      groups_.erase(git);
    return;
  }
  if (was_first)
    g.by_first.emplace(*members.begin(), &members);
}

std::vector<seq_id> rank_index::best(std::size_t n) const {
  std::vector<seq_id> out;
  out.reserve(std::min(n, members_.size()));
  if (n == 0)
    return out;
  walk([&](seq_id id) {
    out.push_back(id);
    return out.size() < n;
  });
  return out;
}

rank_index::rank_key rank_index::rank_key_of(seq_id id) const {
  const auto& m = members_.at(id);
  const auto& members = m.client->second;
  return {m.key, members.order_of_key({m.turn, id}), *members.begin()};
}

void rank_index::sort(std::span<seq_id> ids) const {
  if (ids.size() < 2)
    return; // the usual case for the residents outside the planner's target
  std::vector<std::pair<rank_key, seq_id>> keyed;
  keyed.reserve(ids.size());
  for (auto id : ids)
    keyed.emplace_back(rank_key_of(id), id);
  std::sort(keyed.begin(), keyed.end());
  for (std::size_t i = 0; i < ids.size(); ++i)
    ids[i] = keyed[i].second;
}

} // namespace kvlane::actors
