#include "daemon/http/stream.hpp"

#include <boost/asio/ssl/error.hpp>

#include <openssl/err.h>
#include <openssl/ssl.h>

namespace kvlane::daemon::http {

namespace {

std::variant<stream::tcp::socket, stream::tls_stream> make(stream::tcp::socket socket,
                                                           boost::asio::ssl::context* tls) {
  if (tls == nullptr)
    return std::variant<stream::tcp::socket, stream::tls_stream>{std::in_place_index<0>,
                                                                 std::move(socket)};
  return std::variant<stream::tcp::socket, stream::tls_stream>{std::in_place_index<1>,
                                                               std::move(socket), *tls};
}

} // namespace

stream::stream(tcp::socket socket, boost::asio::ssl::context* tls)
  : s_(make(std::move(socket), tls)) {}

stream::tcp::socket& stream::socket() noexcept {
  if (auto* t = std::get_if<tls_stream>(&s_))
    return t->next_layer();
  return std::get<tcp::socket>(s_);
}

void stream::plaintext_fallback() {
  if (auto* t = std::get_if<tls_stream>(&s_)) {
    tcp::socket raw = std::move(t->next_layer());
    s_.emplace<tcp::socket>(std::move(raw));
  }
}

void stream::cancel() noexcept {
  error_code ec;
  socket().cancel(ec);
}

void stream::close() noexcept {
  error_code ec;
  socket().shutdown(tcp::socket::shutdown_both, ec);
  socket().close(ec);
}

bool plaintext_http_on_tls(const boost::system::error_code& ec) noexcept {
  if (ec.category() != boost::asio::error::get_ssl_category())
    return false;
  const auto reason = ERR_GET_REASON(static_cast<unsigned long>(ec.value()));
  return reason == SSL_R_HTTP_REQUEST || reason == SSL_R_HTTPS_PROXY_REQUEST;
}

} // namespace kvlane::daemon::http
