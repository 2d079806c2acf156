#pragma once
// Request bodies sent with Content-Encoding (RFC 9110 §8.4): gzip and deflate are inflated with
// zlib under a cap on the decoded bytes, so a small compressed body cannot expand into gigabytes.
#include <cstddef>
#include <string>
#include <string_view>

namespace m3::server {

enum class ContentCoding { Identity, Gzip, Deflate, Unsupported };

// The coding named by a Content-Encoding value ("" and "identity": Identity). A list of several
// codings is Unsupported (no client of this API stacks them).
ContentCoding content_coding_of(std::string_view header_value);

// The decoded body. Throws ApiError 413 as soon as the output would pass max_bytes (nothing beyond
// the cap is kept), 400 when the data is not a valid stream of that coding.
std::string decode_content(ContentCoding coding, std::string_view body, size_t max_bytes);

}  // namespace m3::server
