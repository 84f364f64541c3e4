#include "actors/rank_index.hpp"

#include <algorithm>

namespace kvlane::actors {

rank_index::group_key rank_index::key_of(const mlfq_position& p) const noexcept {
  switch (order_) {
    case rank_order::arrival: return {};
    case rank_order::priority: return {p.cls, false, 0};
    case rank_order::mlfq: return {p.cls, p.demoted, rank_level(p)};
  }
  return {};
}

std::string_view rank_index::bucket_of(std::string_view client) const noexcept {
  // Only mlfq interleaves clients; the other orders are by turn inside a group.
  return order_ == rank_order::mlfq ? client : std::string_view{};
}

bool rank_index::insert(seq_id id, const mlfq_position& position, std::string_view client) {
  auto [it, added] = members_.try_emplace(id);
  if (!added)
    return false;
  it->second.id = id;
  place(it->second, key_of(position), position.turn, bucket_of(client));
  return true;
}

bool rank_index::erase(seq_id id) {
  auto it = members_.find(id);
  if (it == members_.end())
    return false;
  remove(it->second);
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
  auto& m = it->second;
  // The client's name lives in its queue's node, which remove() erases when
  // this was its only member: keep a copy then.
  std::string kept;
  std::string_view client = m.client->first;
  if (m.client->second.size() == 1)
    client = kept = m.client->first;
  remove(m);
  place(m, key, position.turn, client);
  return true;
}

void rank_index::place(member& m, group_key key, std::uint64_t turn, std::string_view client) {
  auto& g = groups_[key];
  auto c = g.clients.find(client);
  if (c == g.clients.end())
    c = g.clients.emplace(std::string{client}, member_tree{}).first;
  auto& members = c->second;
  const member_key mk{turn, m.id};
  if (!members.empty() && mk < *members.begin())
    g.by_first.erase({*members.begin(), &members});
  members.insert(mk);
  if (*members.begin() == mk)
    g.by_first.emplace(mk, &members);
  m.key = key;
  m.turn = turn;
  m.client = &*c;
}

void rank_index::remove(const member& m) {
  auto git = groups_.find(m.key);
  auto& g = git->second;
  auto& members = m.client->second;
  const member_key mk{m.turn, m.id};
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
