// StreamingDecoder: token ids in, whole UTF-8 characters out.
#include "tokenizer/byte_level.h"
#include "m3/tokenizer.h"

namespace m3 {
namespace {

constexpr std::string_view kReplacement = "\xEF\xBF\xBD";  // U+FFFD

// Moves the complete part of `pending` to the result. Bytes that can never form a character are
// replaced by U+FFFD at once (one per maximal invalid subpart, the Unicode recommendation), so the
// output is always valid UTF-8; a valid but unfinished character at the end waits in `pending`
// unless `at_end`, when it is replaced too.
std::string take_complete(std::string& pending, bool at_end) {
  std::string out;
  size_t pos = 0;
  while (pos < pending.size()) {
    tok::Utf8Scan s = tok::scan_utf8(pending, pos);
    if (s.kind == tok::Utf8Kind::kIncomplete && !at_end) break;
    if (s.kind == tok::Utf8Kind::kComplete) {
      out.append(pending, pos, s.length);
    } else {
      out += kReplacement;
    }
    pos += s.length;
  }
  pending.erase(0, pos);
  return out;
}

}  // namespace

StreamingDecoder::StreamingDecoder(const Tokenizer& tok, bool skip_special) : tok_(tok), skip_special_(skip_special) {}

std::string StreamingDecoder::push(int32_t id) {
  if (skip_special_ && tok_.is_special(id)) return {};
  pending_ += tok_.token_bytes(id);
  return take_complete(pending_, /*at_end=*/false);
}

std::string StreamingDecoder::flush() { return take_complete(pending_, /*at_end=*/true); }

}  // namespace m3
