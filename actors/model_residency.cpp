#include "actors/model_residency.hpp"

namespace kvlane::actors {

std::string_view to_string(residency r) noexcept {
  switch (r) {
    case residency::unloaded: return "unloaded";
    case residency::loading: return "loading";
    case residency::loaded: return "loaded";
    case residency::unloading: return "unloading";
  }
  return "unknown";
}

namespace {

bool idle(const resident_view& m) {
  return m.state == residency::loaded && m.users == 0;
}

} // namespace

std::vector<std::size_t> expired_models(std::span<const resident_view> models,
                                        resident_view::time_point now) {
  std::vector<std::size_t> out;
  for (std::size_t i = 0; i < models.size(); ++i)
    if (idle(models[i]) && models[i].expires_at && *models[i].expires_at <= now)
      out.push_back(i);
  return out;
}

std::optional<resident_view::time_point> next_expiry(std::span<const resident_view> models,
                                                     resident_view::time_point now) {
  std::optional<resident_view::time_point> out;
  for (const auto& m : models)
    if (idle(m) && m.expires_at && *m.expires_at > now && (!out || *m.expires_at < *out))
      out = m.expires_at;
  return out;
}

room_decision make_room(std::span<const resident_view> models, std::size_t wanted,
                        std::uint32_t max_loaded) {
  if (max_loaded == 0)
    return {};
  std::size_t resident = 0;
  for (std::size_t i = 0; i < models.size(); ++i)
    if (i != wanted && models[i].state != residency::unloaded)
      ++resident;
  if (resident < max_loaded)
    return {};
  std::optional<std::size_t> victim;
  auto better = [&](std::size_t a, std::size_t b) {
    if (models[a].pinned != models[b].pinned)
      return !models[a].pinned; // an unpinned model goes before a pinned one
    return models[a].last_used < models[b].last_used;
  };
  for (std::size_t i = 0; i < models.size(); ++i)
    if (i != wanted && idle(models[i]) && (!victim || better(i, *victim)))
      victim = i;
  if (!victim)
    return {room_decision::verdict::wait, 0};
  return {room_decision::verdict::unload, *victim};
}

} // namespace kvlane::actors
