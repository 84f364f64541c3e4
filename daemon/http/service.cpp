#include "daemon/http/service.hpp"

#include "actors/engine.hpp"

#include <fmt/format.h>

namespace kvlane::daemon::http {

namespace {

std::string_view without_latest_tag(std::string_view name) {
  constexpr std::string_view tag = ":latest";
  if (name.size() > tag.size() && name.ends_with(tag))
    name.remove_suffix(tag.size());
  return name;
}

} // namespace

std::shared_ptr<const actors::model_entry> service::find_model(std::string_view name) const {
  return engine->find_model(without_latest_tag(name));
}

std::string service::model_names() const {
  std::string out;
  for (const auto& m : models)
    out += (out.empty() ? "" : ", ") + m.name;
  return out;
}

void service::with_model(std::string_view name, std::optional<actors::keep_alive> keep,
                         model_ready then) {
  const auto model = std::string{without_latest_tag(name)};
  if (!engine->is_configured(model)) {
    auto e = invalid("model",
                     fmt::format("the model '{}' does not exist (configured: {})", name, model_names()),
                     "model_not_found");
    e.status = 404;
    then(unexpected(std::move(e)));
    return;
  }
  engine->acquire(model, keep, [gate = gate, then = std::move(then)](actors::model_registry::acquired a) {
    gate->post([a = std::move(a), then] {
      if (a) {
        then(*a);
        return;
      }
      api_error e;
      e.status = 503;
      e.type = "server_error";
      e.code = "model_not_loaded";
      e.message = a.error();
      then(unexpected(std::move(e)));
    });
  });
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
