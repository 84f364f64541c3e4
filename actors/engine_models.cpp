// engine: its models and their lifecycle (docs/architecture.md, "Model lifecycle"):
// which are loaded, loading one for a caller, kvlane load and unload. The
// decisions and the waiting are the model registry's (actors/model_registry).

#include "actors/engine.hpp"

#include <fmt/format.h>

namespace kvlane::actors {

engine_config engine::current_config() const {
  std::lock_guard lock{cfg_mu_};
  return cfg_;
}

bool engine::is_configured(std::string_view name) const noexcept {
  return registry_->index_of(name).has_value();
}

std::shared_ptr<const model_entry> engine::find_model(std::string_view name) const {
  const auto i = registry_->index_of(name);
  return i ? registry_->loaded(*i) : nullptr;
}

std::vector<std::shared_ptr<const model_entry>> engine::loaded_models() const {
  return registry_->loaded_models();
}

std::vector<model_status> engine::model_statuses() const {
  return registry_->statuses();
}

std::string engine::unknown_model(std::string_view name) const {
  std::string known;
  for (auto& x : models_)
    known += (known.empty() ? "" : ", ") + x.name;
  return fmt::format("unknown model '{}' (configured: {})", name, known);
}

void engine::acquire(std::string_view name, std::optional<keep_alive> keep,
                     model_registry::acquire_callback done) {
  const auto i = registry_->index_of(name);
  if (!i) {
    done(unexpected(unknown_model(name)));
    return;
  }
  registry_->acquire(*i, keep, std::move(done));
}

expected<std::string, std::string> engine::load(std::string_view name,
                                                std::optional<keep_alive> keep) {
  const auto i = registry_->index_of(name);
  if (!i)
    return unexpected(unknown_model(name));
  const bool was_loaded = registry_->loaded(*i) != nullptr;
  auto lease = registry_->acquire_wait(*i, keep);
  if (!lease)
    return unexpected(std::move(lease).error());
  return was_loaded ? fmt::format("model '{}' is loaded", name)
                    : fmt::format("model '{}' loaded", name);
}

expected<std::string, std::string> engine::unload(std::string_view name) {
  const auto i = registry_->index_of(name);
  if (!i)
    return unexpected(unknown_model(name));
  return registry_->unload(*i);
}

} // namespace kvlane::actors
