#pragma once
// fluxrt::Error, the one exception type the library throws (DESIGN.md section 4), and its codes.
// Public: front ends catch it and map the code (the CLI to an exit code, the server to an HTTP
// status). The library's internal headers include this file (core/error.h), so what a caller
// catches is the very type that was thrown. Messages are one line naming the op, tensor or file.
#include <stdexcept>
#include <string>

namespace fluxrt {

enum class ErrorCode {
  InvalidArgument,  // a bad request, option or value
  NotFound,         // a model, file or component that is not there
  Format,           // a file that is not what it claims (corrupt, truncated, wrong layout)
  Unsupported,      // understood but not handled (another model family, a device not built)
  Io,               // reading or writing failed
  OutOfMemory,      // the request or model does not fit
  Device,           // the accelerator failed
  Internal,         // a bug: an internal check failed
  Cancelled,        // the caller asked to stop (Ctrl-C, a cancelled server request)
};

// "invalid argument", "not found", ...: the code in words, for logs and messages.
const char* error_code_name(ErrorCode code);

class Error : public std::runtime_error {
 public:
  Error(ErrorCode code, std::string message, std::string field = {})
      : std::runtime_error(std::move(message)), code_(code), field_(std::move(field)) {}
  // Out of line: the type's vtable and type_info then live in the library once, so a program
  // linked to the shared libfluxrt catches the exceptions the library throws.
  ~Error() override;
  ErrorCode code() const { return code_; }
  // For a rejected request: the field at fault, by its key in the request field table
  // (fluxrt/request_fields.h: "steps", "size", "batch", ...) or "prompts", "reference_images",
  // "init_image", "loras" for the inputs outside it, so a front end can name its own parameter
  // (the server's `param`). Empty when the error is about no one field.
  const std::string& field() const { return field_; }

 private:
  ErrorCode code_;
  std::string field_;
};

}  // namespace fluxrt
