#include "server/api_error.h"

namespace eg::server {

namespace {
const char* type_for(int status) {
  switch (status) {
    case 401: return "authentication_error";
    case 404: return "not_found_error";
    case 429: return "rate_limit_error";
    case 503: return "server_busy";
    default: return status >= 500 ? "server_error" : "invalid_request_error";
  }
}
}  // namespace

std::string ApiError::type() const { return type_for(status_); }

nlohmann::json ApiError::to_json() const { return error_json(status_, what(), param_, code_); }

nlohmann::json error_json(int status, const std::string& message, const std::string& param,
                          const std::string& code) {
  nlohmann::json e;
  e["message"] = message;
  e["type"] = type_for(status);
  e["param"] = param.empty() ? nlohmann::json(nullptr) : nlohmann::json(param);
  e["code"] = code.empty() ? nlohmann::json(nullptr) : nlohmann::json(code);
  return nlohmann::json{{"error", e}};
}

}  // namespace eg::server
