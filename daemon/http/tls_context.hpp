#pragma once

// kvlane::daemon::http::make_tls_context — the HTTP API's TLS server context.
//
// Problem it solves: a listener outside loopback carries bearer keys and prompts; TLS
// keeps them off the wire in clear. The context is built once at start-up from PEM
// files, so that a bad file stops the daemon with a message naming it, instead of
// every handshake failing later. TLS 1.2 and 1.3 only, OpenSSL's default ciphers.

#include "common/expected.hpp"

#include <boost/asio/ssl/context.hpp>

#include <memory>
#include <string>

namespace kvlane::daemon::http {

/// A server context from `cert_path` (PEM: the certificate, then any intermediates) and
/// `key_path` (PEM: its unencrypted private key). Errors name the config key and the file:
/// unreadable, not PEM, an encrypted key, a key that does not match the certificate.
expected<std::unique_ptr<boost::asio::ssl::context>, std::string>
make_tls_context(const std::string& cert_path, const std::string& key_path);

} // namespace kvlane::daemon::http
