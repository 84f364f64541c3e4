#pragma once

// kvlane::daemon::http::identity — who an HTTP request runs as.
//
// Problem it solves: the HTTP API has no peer uid to tell its users apart, so
// every API key of [[http.keys]] is an identity of its own (docs/http.md,
// "Identities"): its admission unit (its own live-request limit, and
// [clients] max_live_sequences with everyone), its share of the scheduler's
// per-client round robin, and its reuse scope — one key's retained KV never
// serves another key's prompt unless both have scope "all". [http] api_key
// (or api_key_file) is one identity named "default", and so is a keyless API.
//
// key_ring holds the identities and their keys. Built once when the server
// starts and immutable after: the HTTP thread reads it without locks, and the
// identities it hands out live as long as the server.

#include "common/expected.hpp"
#include "daemon/config.hpp"

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace kvlane::daemon::http {

struct identity {
  std::string name;   ///< "default", or the key's name
  std::string client; ///< "http:<name>": the round-robin unit; how ps, top and logs name it
  /// The admission unit: actors::http_owner for "default", http_owner + 1 + index for a key.
  std::uint64_t principal = 0;
  /// The reuse scope: the principal, or actors::shared_owner for a key with scope "all".
  std::uint64_t owner = 0;
  bool batch_only = false;        ///< max_priority "batch": requests run in the batch class
  std::uint32_t max_requests = 0; ///< live requests at once; 0 = [clients] max_requests_per_user
  std::string limit_key; ///< the setting a refusal names ("http.keys[1].max_requests")
};

class key_ring {
public:
  /// `api_key`: [http] api_key, or the key read from api_key_file; empty when none.
  /// Without any key every request runs as "default". Errors (naming the setting): a key
  /// of [[http.keys]] equal to api_key.
  static expected<key_ring, std::string> create(std::string api_key,
                                                const std::vector<http_key>& keys);

  /// Whether requests must carry a key (one is configured).
  bool keyed() const noexcept { return !keys_.empty(); }

  /// The identity whose key an Authorization header ("Bearer KEY", scheme
  /// case-insensitive) carries; nullptr when it carries none of them. Without keys:
  /// "default", whatever the header. Every key is compared, each in constant time,
  /// whichever matches: the time tells nothing about which key is close.
  const identity* authenticate(std::string_view authorization) const noexcept;

  const std::vector<identity>& identities() const noexcept { return ids_; }

private:
  std::vector<identity> ids_;
  std::vector<std::string> keys_; ///< keys_[i] names ids_[i]; empty without keys
};

} // namespace kvlane::daemon::http
