#pragma once
// An error answered in OpenAI's shape, {"error": {"message", "type", "param", "code"}}, with its
// HTTP status. Request parsing and the handlers throw it; the router turns it into the response,
// so every refusal has one place where its status and wording are decided.
#include <stdexcept>
#include <string>

#include "fluxrt/error.h"

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

// What a failed engine call (or a refusal of Engine::plan) means for the client: a 400 naming the
// request parameter its GenerateRequest field comes from, 499 for a cancel, else a 500.
HttpError http_error_of(const Error& e);

}  // namespace fluxrt::server
