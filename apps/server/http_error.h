#pragma once
// An error answered in OpenAI's shape, {"error": {"message", "type", "param", "code"}}, with its
// HTTP status. Request parsing and the handlers throw it; the router turns it into the response,
// so every refusal has one place where its status and wording are decided.
#include <stdexcept>
#include <string>

namespace fluxrt::server {

class HttpError : public std::runtime_error {
 public:
  HttpError(int status, std::string message, std::string param = {}, std::string code = {})
      : std::runtime_error(std::move(message)),
        status_(status),
        param_(std::move(param)),
        code_(std::move(code)) {}
  int status() const { return status_; }
  const std::string& param() const { return param_; }  // the request field at fault, "" for none
  const std::string& code() const { return code_; }    // a machine-readable reason, "" for none

 private:
  int status_;
  std::string param_;
  std::string code_;
};

// The OpenAI error type for a status: invalid_request_error for the 4xx a client can fix, ...
const char* error_type_for(int status);

// The error body: {"error": {...}} with null for an empty param or code.
std::string error_body(int status, const std::string& message, const std::string& param = {},
                       const std::string& code = {});

}  // namespace fluxrt::server
