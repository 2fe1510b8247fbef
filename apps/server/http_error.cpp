// The refusals' shape and wording: OpenAI's error object, and what an engine error means for
// the client (its status, and the API parameter of the request field it names).
#include "http_error.h"

#include <nlohmann/json.hpp>
#include <utility>

#include "fluxrt/request_fields.h"

namespace fluxrt::server {

using nlohmann::json;

namespace {

// The request parameter of this API that an engine error's field comes from (Error::field: a key
// of the field table, or an input outside it), so a refusal found only when the engine looks at
// the request still names it.
std::string param_of_field(const std::string& field) {
  if (const RequestField* f = find_request_field(field)) return f->api;
  if (field == "prompts") return "prompt";
  if (field == "reference_images" || field == "init_image") return "image";
  if (field == "loras") return "loras";
  if (field == "mask") return "mask";
  return "";
}

}  // namespace

const char* error_type_for(int status) {
  if (status == 401) return "authentication_error";
  if (status == 429) return "rate_limit_error";
  if (status >= 500) return "server_error";
  return "invalid_request_error";
}

std::string error_body(int status, const std::string& message, const std::string& param,
                       const std::string& code) {
  json e = {{"message", message},
            {"type", error_type_for(status)},
            {"param", param.empty() ? json(nullptr) : json(param)},
            {"code", code.empty() ? json(nullptr) : json(code)}};
  return json{{"error", e}}.dump(-1, ' ', false, json::error_handler_t::replace);
}

// What a failed generate call means for the client.
HttpError http_error_of(const Error& e) {
  // A LoRA the request chose that turns out not to fit the model (its shapes), or a file in the
  // LoRA folder that cannot be read: the request's choice, whatever the code.
  if (e.field() == "loras" && e.code() != ErrorCode::OutOfMemory && e.code() != ErrorCode::Cancelled &&
      e.code() != ErrorCode::Internal && e.code() != ErrorCode::Device)
    return HttpError(400, std::string("'loras': ") + e.what(), "loras", "invalid_lora");
  switch (e.code()) {
    case ErrorCode::InvalidArgument:
    case ErrorCode::Unsupported:
      return HttpError(400, e.what(), param_of_field(e.field()), "invalid_request");
    case ErrorCode::OutOfMemory:
      return HttpError(400, std::string("the request does not fit in this server's memory: ") + e.what(),
                       "size", "out_of_memory");
    case ErrorCode::Cancelled:
      return HttpError(499, e.what(), "", "cancelled");
    default:
      return HttpError(500, std::string(error_code_name(e.code())) + ": " + e.what(), "", "internal_error");
  }
}

}  // namespace fluxrt::server
