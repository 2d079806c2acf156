#pragma once
// An error a client caused (or hit), as OpenAI reports it:
//   {"error": {"message": ..., "type": ..., "param": ..., "code": ...}}
// Request parsing throws ApiError; the HTTP layer turns it into the status and body.
#include <stdexcept>
#include <string>

#include "m3/chat/m3_format.h"

namespace m3::server {

using Json = chat::Json;

struct ApiError : std::runtime_error {
  int status;
  std::string type, param, code;
  ApiError(int status_, std::string message, std::string param_ = {}, std::string code_ = {},
           std::string type_ = "invalid_request_error")
      : std::runtime_error(std::move(message)), status(status_), type(std::move(type_)), param(std::move(param_)),
        code(std::move(code_)) {}
};

// The OpenAI error body; empty param/code become null.
inline Json error_body(const std::string& message, const std::string& type, const std::string& param = {},
                       const std::string& code = {}) {
  Json e = Json::object();
  e["message"] = message;
  e["type"] = type;
  e["param"] = param.empty() ? Json() : Json(param);
  e["code"] = code.empty() ? Json() : Json(code);
  return Json{{"error", e}};
}

inline Json error_body(const ApiError& e) { return error_body(e.what(), e.type, e.param, e.code); }

}  // namespace m3::server
