// OpenAI-style API errors: every bad request becomes an HTTP 4xx with a JSON body
// {"error": {"message", "type", "param", "code"}} (the shape OpenAI's API and clients use).
#pragma once
#include <nlohmann/json.hpp>
#include <string>

#include "core/error.h"

namespace eg::server {

/// Thrown by request parsing and handlers; turned into an HTTP response by the router.
/// status: 400 bad request, 401 missing/wrong API key, 404 unknown route or model, 413 body too
/// large, 429 queue full, 503 shutting down / timed out waiting for a slot.
class ApiError : public Error {
 public:
  ApiError(int status, const std::string& message, std::string param = "", std::string code = "")
      : Error(message), status_(status), param_(std::move(param)), code_(std::move(code)) {}
  int status() const { return status_; }
  const std::string& param() const { return param_; }
  const std::string& code() const { return code_; }
  /// OpenAI's error type for the status ("invalid_request_error", "authentication_error", ...).
  std::string type() const;
  nlohmann::json to_json() const;

 private:
  int status_;
  std::string param_, code_;
};

/// The OpenAI error object for `status` and `message` (param/code null when empty).
nlohmann::json error_json(int status, const std::string& message, const std::string& param = "",
                          const std::string& code = "");

}  // namespace eg::server
