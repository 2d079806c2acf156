#pragma once
// Re-chunks a byte stream into pieces that are always valid UTF-8, whatever the chunking: a
// character split across pushes is held back until complete, and invalid bytes become U+FFFD
// (one per maximal ill-formed subpart, as WHATWG/Unicode recommend). Every delta the output
// parser emits is therefore safe to put into JSON on its own.
#include <string>
#include <string_view>

namespace m3::chat {

class Utf8Stream {
 public:
  std::string push(std::string_view bytes);
  std::string flush();  // an incomplete trailing character becomes U+FFFD

 private:
  std::string pending_;
};

}  // namespace m3::chat
