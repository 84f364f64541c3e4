#include "daemon/http/service.hpp"

#include "actors/engine.hpp"

namespace kvlane::daemon::http {

namespace {

std::string_view without_latest_tag(std::string_view name) {
  constexpr std::string_view tag = ":latest";
  if (name.size() > tag.size() && name.ends_with(tag))
    name.remove_suffix(tag.size());
  return name;
}

} // namespace

const actors::model_entry* service::find_model(std::string_view name) const {
  return engine->find_model(without_latest_tag(name));
}

const model_section* service::find_model_config(std::string_view name) const {
  name = without_latest_tag(name);
  for (const auto& m : models)
    if (m.name == name)
      return &m;
  return nullptr;
}

render_pool& service::renders() {
  if (!render_workers)
    render_workers = std::make_unique<render_pool>(default_render_limits());
  return *render_workers;
}

} // namespace kvlane::daemon::http
