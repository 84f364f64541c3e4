#include "daemon/http/tls_context.hpp"

#include "common/logging.hpp"

#include <fmt/format.h>

#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <optional>

namespace kvlane::daemon::http {

namespace {

namespace ssl = boost::asio::ssl;
using error_code = boost::system::error_code;

/// OpenSSL's reason for `ec` ("no start line", "key values mismatch"), without its codes.
std::string reason(const error_code& ec) {
  const auto code = static_cast<unsigned long>(ec.value());
  if (ec.category() == boost::asio::error::get_ssl_category())
    if (const char* r = ERR_reason_error_string(code))
      return r;
  return ec.message();
}

/// Whether `path` can be opened for reading; else why not.
std::optional<std::string> unreadable(const std::string& path) {
  std::FILE* f = std::fopen(path.c_str(), "rb");
  if (f == nullptr)
    return std::string{std::strerror(errno)};
  std::fclose(f);
  return std::nullopt;
}

} // namespace

expected<std::unique_ptr<ssl::context>, std::string>
make_tls_context(const std::string& cert_path, const std::string& key_path) {
  if (auto why = unreadable(cert_path))
    return unexpected(fmt::format("http.tls_cert: cannot read '{}': {}", cert_path, *why));
  if (auto why = unreadable(key_path))
    return unexpected(fmt::format("http.tls_key: cannot read '{}': {}", key_path, *why));

  auto ctx = std::make_unique<ssl::context>(ssl::context::tls_server);
  ctx->set_options(ssl::context::default_workarounds | ssl::context::no_sslv2
                   | ssl::context::no_sslv3 | ssl::context::no_tlsv1 | ssl::context::no_tlsv1_1
                   | ssl::context::no_compression | ssl::context::single_dh_use);
  SSL_CTX_set_min_proto_version(ctx->native_handle(), TLS1_2_VERSION);
  // An encrypted key would make OpenSSL ask for a passphrase on the terminal: refuse instead.
  bool asked_passphrase = false;
  ctx->set_password_callback([&asked_passphrase](std::size_t, ssl::context::password_purpose) {
    asked_passphrase = true;
    return std::string{};
  });

  error_code ec;
  ctx->use_certificate_chain_file(cert_path, ec);
  if (ec)
    return unexpected(fmt::format("http.tls_cert: '{}' holds no PEM certificate ({})", cert_path,
                                  reason(ec)));
  ctx->use_private_key_file(key_path, ssl::context::pem, ec);
  if (ec) {
    const auto r = ERR_GET_REASON(static_cast<unsigned long>(ec.value()));
    if (asked_passphrase)
      return unexpected(fmt::format("http.tls_key: '{}' is encrypted: kvlaned needs the key "
                                    "unencrypted (readable by its user only)",
                                    key_path));
    if (r == X509_R_KEY_VALUES_MISMATCH || r == X509_R_KEY_TYPE_MISMATCH)
      return unexpected(fmt::format("http.tls_key: '{}' is not the key of the certificate in "
                                    "'{}' ({})",
                                    key_path, cert_path, reason(ec)));
    return unexpected(fmt::format("http.tls_key: '{}' holds no PEM private key ({})", key_path,
                                  reason(ec)));
  }
  if (SSL_CTX_check_private_key(ctx->native_handle()) != 1)
    return unexpected(fmt::format("http.tls_key: '{}' is not the key of the certificate in '{}'",
                                  key_path, cert_path));
  ctx->set_password_callback([](std::size_t, ssl::context::password_purpose) {
    return std::string{};
  });
  if (X509* leaf = SSL_CTX_get0_certificate(ctx->native_handle());
      leaf != nullptr && X509_cmp_current_time(X509_get0_notAfter(leaf)) < 0)
    logging::get("http")->warn("the certificate in '{}' has expired: clients will refuse it",
                               cert_path);
  return ctx;
}

} // namespace kvlane::daemon::http
