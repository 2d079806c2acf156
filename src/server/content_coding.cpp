#include "server/content_coding.h"

#include <zlib.h>

#include <algorithm>
#include <cctype>

#include "m3/error.h"
#include "server/api_error.h"
#include "server/header_text.h"

namespace m3::server {

ContentCoding content_coding_of(std::string_view header_value) {
  const std::string v = lower_trimmed(header_value);
  if (v.empty() || v == "identity") return ContentCoding::Identity;
  if (v == "gzip" || v == "x-gzip") return ContentCoding::Gzip;
  if (v == "deflate") return ContentCoding::Deflate;
  return ContentCoding::Unsupported;
}

std::string decode_content(ContentCoding coding, std::string_view body, size_t max_bytes) {
  if (coding == ContentCoding::Identity) return std::string(body);
  M3_CHECK(coding != ContentCoding::Unsupported, "decode_content: unsupported coding");
  const char* name = coding == ContentCoding::Gzip ? "gzip" : "deflate";
  z_stream z{};
  // HTTP's "deflate" is the zlib format (RFC 9110 §8.4.1.2); 16 + 15 selects the gzip wrapper.
  if (inflateInit2(&z, coding == ContentCoding::Gzip ? 16 + MAX_WBITS : MAX_WBITS) != Z_OK)
    throw ApiError(500, "cannot start zlib", {}, {}, "server_error");
  struct End {
    z_stream* z;
    ~End() { inflateEnd(z); }
  } end{&z};
  std::string out;
  z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(body.data()));
  z.avail_in = uInt(body.size());  // the raw body is already under max_body_bytes, far below 4 GiB
  constexpr size_t kStep = 64 << 10;
  for (;;) {
    if (out.size() >= max_bytes + 1)
      throw ApiError(413, str_cat("request body larger than the limit of ", max_bytes, " bytes once decoded (Content-Encoding: ", name,
                                  "; --max-body-bytes)"),
                     {}, "request_too_large");
    // At most one byte past the cap is produced: enough to know the cap is passed.
    const size_t room = std::min(kStep, max_bytes + 1 - out.size());
    const size_t at = out.size();
    out.resize(at + room);
    z.next_out = reinterpret_cast<Bytef*>(out.data() + at);
    z.avail_out = uInt(room);
    const int rc = inflate(&z, Z_NO_FLUSH);
    out.resize(at + (room - z.avail_out));
    if (rc == Z_STREAM_END) break;
    if (rc == Z_BUF_ERROR && z.avail_in == 0)
      throw ApiError(400, str_cat("request body: truncated ", name, " data"), {}, "invalid_content_encoding");
    if (rc != Z_OK && rc != Z_BUF_ERROR)
      throw ApiError(400, str_cat("request body: invalid ", name, " data (", z.msg ? z.msg : "zlib error", ")"), {},
                     "invalid_content_encoding");
  }
  if (out.size() > max_bytes)
    throw ApiError(413, str_cat("request body larger than the limit of ", max_bytes, " bytes once decoded (Content-Encoding: ", name,
                                "; --max-body-bytes)"),
                   {}, "request_too_large");
  if (z.avail_in != 0)
    throw ApiError(400, str_cat("request body: ", z.avail_in, " bytes after the end of the ", name, " data"), {},
                   "invalid_content_encoding");
  return out;
}

}  // namespace m3::server
