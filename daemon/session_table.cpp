#include "daemon/session_table.hpp"

#include <fmt/format.h>

#include <algorithm>

namespace kvlane::daemon {

namespace {

std::string describe(const session_key& key) {
  return fmt::format("session '{}' of model '{}'", key.name, key.model);
}

} // namespace

void session_table::set_limits(const session_limits& limits, clock::time_point now) {
  std::lock_guard lock{mu_};
  limits_ = limits;
  expire_locked(now);
  while (sessions_.size() > limits_.max_sessions && evict_one_locked(std::nullopt)) {
  }
  // Per-user caps: evict each user's oldest idle sessions down to the cap.
  std::map<std::uint32_t, std::size_t> per_user;
  for (auto& [key, e] : sessions_)
    ++per_user[key.uid];
  for (auto& [uid, n] : per_user)
    while (n > limits_.max_per_user && evict_one_locked(uid))
      --n;
}

session_limits session_table::limits() const {
  std::lock_guard lock{mu_};
  return limits_;
}

expected<session_turn, session_error>
session_table::begin_turn(const session_key& key, std::span<const backends::token_id> prompt,
                          std::optional<backends::token_id> bos, std::uint32_t max_tokens,
                          std::uint32_t max_context, clock::time_point now) {
  std::lock_guard lock{mu_};
  if (limits_.max_per_user == 0 || limits_.max_sessions == 0)
    return unexpected(session_error{session_errc::disabled,
                                    "sessions are disabled on this daemon ([sessions] "
                                    "max_per_user or max_sessions is 0)"});
  expire_locked(now);
  auto it = sessions_.find(key);
  if (it != sessions_.end() && it->second.ticket != 0)
    return unexpected(session_error{
      session_errc::busy, describe(key) + " is still answering its last turn: wait for its end "
                                          "(or cancel it) before sending the next one"});

  const std::size_t history = it == sessions_.end() ? 0 : it->second.history.size();
  const std::size_t lead = history == 0 && bos ? 1 : 0;
  const std::uint64_t need = std::uint64_t{history} + lead + prompt.size() + max_tokens;
  if (need > max_context)
    return unexpected(session_error{
      session_errc::too_long,
      fmt::format("{} holds {} tokens; with this turn's {} prompt tokens and max_tokens {} it "
                  "needs {} tokens of context, the model has {}: drop the session (/clear) or "
                  "start another one",
                  describe(key), history, lead + prompt.size(), max_tokens, need, max_context)});

  if (it == sessions_.end()) {
    // Make room first, so that a refusal changes nothing.
    const bool user_full = count_of_locked(key.uid) >= limits_.max_per_user;
    if (user_full && !evict_one_locked(key.uid))
      return unexpected(session_error{
        session_errc::busy,
        fmt::format("all {} sessions of this user are answering a turn ([sessions] max_per_user)",
                    limits_.max_per_user)});
    if (sessions_.size() >= limits_.max_sessions && !evict_one_locked(std::nullopt))
      return unexpected(session_error{
        session_errc::busy,
        fmt::format("all {} sessions of the daemon are answering a turn ([sessions] max_sessions)",
                    limits_.max_sessions)});
    it = sessions_.emplace(key, entry{}).first;
  }

  auto& e = it->second;
  session_turn turn;
  turn.ticket = next_ticket_++;
  turn.history_tokens = e.history.size();
  turn.tokens.reserve(e.history.size() + lead + prompt.size());
  turn.tokens = e.history;
  if (lead != 0)
    turn.tokens.push_back(*bos);
  turn.tokens.insert(turn.tokens.end(), prompt.begin(), prompt.end());
  e.turn = turn.tokens;
  e.ticket = turn.ticket;
  e.last_used = now;
  return turn;
}

bool session_table::end_turn(const session_key& key, std::uint64_t ticket,
                             std::span<const backends::token_id> generated, clock::time_point now) {
  std::lock_guard lock{mu_};
  auto it = sessions_.find(key);
  if (it == sessions_.end() || it->second.ticket != ticket || ticket == 0)
    return false;
  auto& e = it->second;
  e.history = std::move(e.turn);
  e.history.insert(e.history.end(), generated.begin(), generated.end());
  e.turn = {};
  e.ticket = 0;
  e.last_used = now;
  return true;
}

void session_table::abort_turn(const session_key& key, std::uint64_t ticket) {
  std::lock_guard lock{mu_};
  auto it = sessions_.find(key);
  if (it == sessions_.end() || it->second.ticket != ticket || ticket == 0)
    return;
  if (it->second.history.empty()) {
    sessions_.erase(it);
    return;
  }
  it->second.turn = {};
  it->second.ticket = 0;
}

bool session_table::drop(const session_key& key) {
  std::lock_guard lock{mu_};
  if (sessions_.erase(key) == 0)
    return false;
  ++dropped_;
  return true;
}

std::vector<backends::token_id> session_table::history(const session_key& key) const {
  std::lock_guard lock{mu_};
  auto it = sessions_.find(key);
  return it == sessions_.end() ? std::vector<backends::token_id>{} : it->second.history;
}

session_table_stats session_table::stats() const {
  std::lock_guard lock{mu_};
  session_table_stats s;
  s.sessions = sessions_.size();
  for (auto& [key, e] : sessions_) {
    s.running += e.ticket != 0 ? 1 : 0;
    s.history_tokens += e.history.size();
  }
  s.evicted = evicted_;
  s.expired = expired_;
  s.dropped = dropped_;
  return s;
}

void session_table::expire_locked(clock::time_point now) {
  if (limits_.idle_ttl.count() == 0)
    return;
  for (auto it = sessions_.begin(); it != sessions_.end();) {
    if (it->second.ticket == 0 && now - it->second.last_used > limits_.idle_ttl) {
      it = sessions_.erase(it);
      ++expired_;
    } else {
      ++it;
    }
  }
}

bool session_table::evict_one_locked(std::optional<std::uint32_t> uid) {
  auto victim = sessions_.end();
  for (auto it = sessions_.begin(); it != sessions_.end(); ++it) {
    if (it->second.ticket != 0 || (uid && it->first.uid != *uid))
      continue;
    if (victim == sessions_.end() || it->second.last_used < victim->second.last_used)
      victim = it;
  }
  if (victim == sessions_.end())
    return false;
  sessions_.erase(victim);
  ++evicted_;
  return true;
}

std::size_t session_table::count_of_locked(std::uint32_t uid) const {
  return static_cast<std::size_t>(std::count_if(
    sessions_.begin(), sessions_.end(), [uid](auto& kv) { return kv.first.uid == uid; }));
}

} // namespace kvlane::daemon
