#include "daemon/http/errors.hpp"

#include <nlohmann/json.hpp>

namespace kvlane::daemon::http {

api_error invalid(std::string param, std::string message, std::string code) {
  api_error e;
  e.param = std::move(param);
  e.message = std::move(message);
  e.code = std::move(code);
  return e;
}

api_error unsupported(std::string param, std::string why) {
  auto message = "'" + param + "' is not supported by kvlane";
  if (!why.empty())
    message += ": " + why;
  return invalid(std::move(param), std::move(message), "unsupported_parameter");
}

std::string render(const api_error& e, dialect d) {
  using nlohmann::json;
  if (d == dialect::ollama)
    return json{{"error", e.message}}.dump(-1, ' ', false, json::error_handler_t::replace);
  json body{{"message", e.message},
            {"type", e.type},
            {"param", e.param.empty() ? json(nullptr) : json(e.param)},
            {"code", e.code.empty() ? json(nullptr) : json(e.code)}};
  return json{{"error", std::move(body)}}.dump(-1, ' ', false, json::error_handler_t::replace);
}

} // namespace kvlane::daemon::http
