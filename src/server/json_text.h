#pragma once
// The text of a JSON body the server sends. Invalid UTF-8 in a string (a client's own bytes echoed
// back, a token cut mid-character) is replaced by U+FFFD instead of throwing.
#include <string>

#include "server/api_error.h"

namespace m3::server {

inline std::string dump(const Json& j) { return j.dump(-1, ' ', false, Json::error_handler_t::replace); }

}  // namespace m3::server
