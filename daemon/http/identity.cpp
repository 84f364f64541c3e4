#include "daemon/http/identity.hpp"

#include "actors/scheduler.hpp"
#include "daemon/http/access.hpp"

#include <fmt/format.h>

namespace kvlane::daemon::http {

expected<key_ring, std::string> key_ring::create(std::string api_key,
                                                 const std::vector<http_key>& keys) {
  key_ring out;
  if (!api_key.empty() || keys.empty()) {
    identity d;
    d.name = "default";
    d.client = "http:default";
    d.principal = actors::http_owner;
    d.owner = actors::http_owner;
    d.limit_key = "[clients] max_requests_per_user";
    out.ids_.push_back(std::move(d));
    if (!api_key.empty())
      out.keys_.push_back(std::move(api_key));
  }
  for (std::size_t i = 0; i < keys.size(); ++i) {
    const auto& k = keys[i];
    // The config rejects equal keys among [[http.keys]]; api_key_file is read only now.
    for (std::size_t j = 0; j < out.keys_.size(); ++j)
      if (out.keys_[j] == k.key)
        return unexpected(fmt::format("http.keys[{}] ('{}'): the same key as {}: each key must "
                                      "be distinct, it names one identity",
                                      i, k.name,
                                      out.ids_[j].name == "default" ? "http.api_key"
                                                                    : out.ids_[j].name));
    identity id;
    id.name = k.name;
    id.client = "http:" + k.name;
    id.principal = actors::http_owner + 1 + i;
    id.owner = k.share_all ? actors::shared_owner : id.principal;
    id.batch_only = k.batch_only;
    id.max_requests = k.max_requests.value_or(0);
    id.limit_key = k.max_requests ? fmt::format("http.keys[{}].max_requests", i)
                                  : "[clients] max_requests_per_user";
    out.ids_.push_back(std::move(id));
    out.keys_.push_back(k.key);
  }
  return out;
}

const identity* key_ring::authenticate(std::string_view authorization) const noexcept {
  if (keys_.empty())
    return &ids_.front();
  const auto token = bearer_token(authorization).value_or(std::string_view{});
  // No early exit: every key is compared whichever one matches.
  const identity* found = nullptr;
  for (std::size_t i = 0; i < keys_.size(); ++i) {
    const bool match = constant_time_equal(token, keys_[i]);
    found = match ? &ids_[i] : found;
  }
  return token.empty() ? nullptr : found;
}

} // namespace kvlane::daemon::http
