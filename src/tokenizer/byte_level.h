#pragma once
// Helpers shared by the tokenizer files: the GPT-2 byte<->unicode mapping that byte-level BPE
// vocabularies are written in, and a UTF-8 scanner that tells complete, incomplete and invalid
// sequences apart (used for invalid input and for streaming output).
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace m3::tok {

// GPT-2 maps every byte to a printable code point so that vocabularies can be stored as text:
// bytes that are already printable (and not space) map to themselves, the rest to U+0100 onwards.
// Returns the UTF-8 text of the code point standing for `byte`.
const std::string& byte_to_unicode(uint8_t byte);

// Inverse of the mapping, applied to a whole vocabulary string. Returns nullopt when some
// character is not one of the 256 mapped code points (such a token cannot come from bytes).
std::optional<std::string> unicode_to_bytes(std::string_view mapped);

// The mapped form of raw bytes (what tokenizer.json stores for them).
std::string bytes_to_unicode(std::string_view bytes);

// Result of looking at the UTF-8 sequence starting at some byte.
enum class Utf8Kind {
  kComplete,    // a whole, valid character of `length` bytes
  kIncomplete,  // the valid start of a character that runs past the end of the buffer
  kInvalid,     // `length` bytes (>= 1) that can never be part of a valid character
};
struct Utf8Scan {
  Utf8Kind kind;
  size_t length;
};

// Classifies the sequence at text[pos]; strict UTF-8 (no overlongs, no surrogates, <= U+10FFFF).
// For kInvalid, `length` is the maximal subpart (the bytes that looked valid until the error),
// which is how replacement characters are counted by the Unicode standard's recommendation.
Utf8Scan scan_utf8(std::string_view text, size_t pos);

// Appends the UTF-8 encoding of a code point.
void append_utf8(std::string& out, uint32_t code_point);

// Decodes the character at text[pos], which the caller knows to be complete and valid.
uint32_t decode_utf8(std::string_view text, size_t pos, size_t length);

// True for code points with the Unicode White_Space property.
bool is_unicode_whitespace(uint32_t code_point);

}  // namespace m3::tok
