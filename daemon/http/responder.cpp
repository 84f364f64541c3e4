#include "daemon/http/responder.hpp"

namespace kvlane::daemon::http {

response error_response(const api_error& e, dialect d) {
  response r;
  r.status = e.status;
  r.body = render(e, d);
  if (e.retry_after)
    r.headers.emplace_back("Retry-After", std::to_string(*e.retry_after));
  if (e.status == 401)
    r.headers.emplace_back("WWW-Authenticate", "Bearer");
  return r;
}

response json_response(std::string body) {
  response r;
  r.body = std::move(body);
  return r;
}

} // namespace kvlane::daemon::http
