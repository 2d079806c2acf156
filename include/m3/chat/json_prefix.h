#pragma once
// Byte-level recognizer of JSON text prefixes (RFC 8259), for constrained sampling
// (`response_format: {"type": "json_object"}`): feed() accepts a byte only if some JSON text still
// starts with everything fed so far, so a sampler that keeps to accepted tokens writes valid JSON.
// The top-level value must be an object; whitespace may precede and follow it. Strings take any
// byte >= 0x20 except the quote and the backslash raw (UTF-8 is not re-validated: a token may end
// inside a multi-byte character); escapes are checked, numbers follow the grammar exactly.
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace m3::chat {

class JsonPrefix {
 public:
  // All of s, or false with the state unchanged.
  bool feed(std::string_view s);
  // Whether all of s could be fed (the state is not changed).
  bool accepts(std::string_view s) const;
  // The top-level object is closed: only whitespace may follow.
  bool complete() const { return mode_ == Mode::Done; }

 private:
  enum class Mode : uint8_t {
    Start,       // before the top-level value
    Value,       // a value is expected (after ':' or ',' in an array)
    ArrayStart,  // a value or ']' is expected (right after '[')
    Key,         // a key or '}' is expected (right after '{')
    NextKey,     // a key is expected (after ',' in an object)
    Colon,       // ':' is expected
    After,       // a value ended: ',' or the container's closer
    String,      // inside a string
    Escape,      // after a backslash
    Unicode,     // in \uXXXX; hex_left digits to go
    Number,      // inside a number; num_ says where
    Literal,     // inside true / false / null; literal_ rest to match
    Done,        // the top-level object is closed
  };
  enum class Num : uint8_t { Minus, Zero, Int, Dot, Frac, Exp, ExpSign, ExpInt };

  bool step(char c);
  bool end_value();  // a value just ended: After, or Done at the top level

  Mode mode_ = Mode::Start;
  Num num_ = Num::Minus;
  bool string_is_key_ = false;
  int hex_left_ = 0;
  std::string literal_;  // the rest of the literal being read
  std::string stack_;    // open containers, '{' or '['
};

// Sets logits[t] = -inf for every token t whose text cannot continue `json` (token_text[t]; an
// empty text, e.g. a special token, never can), except `also_allowed` (-1: none). One pass over the
// vocabulary: `m3 bench json` measures it.
void mask_json_tokens(const JsonPrefix& json, const std::vector<std::string>& token_text, float* logits,
                      int32_t also_allowed);

}  // namespace m3::chat
