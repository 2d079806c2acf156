// decode_content: gzip/deflate bodies inflate under a cap on the decoded bytes.
#include <gtest/gtest.h>
#include <zlib.h>

#include <string>

#include "server/api_error.h"
#include "server/content_coding.h"
#include "zlib_compress.h"

namespace m3::server {
namespace {

int status_of(ContentCoding c, const std::string& body, size_t cap) {
  try {
    decode_content(c, body, cap);
    return 200;
  } catch (const ApiError& e) {
    return e.status;
  }
}

TEST(ContentCoding, NamesOfCodings) {
  EXPECT_EQ(content_coding_of(""), ContentCoding::Identity);
  EXPECT_EQ(content_coding_of(" Identity "), ContentCoding::Identity);
  EXPECT_EQ(content_coding_of("GZIP"), ContentCoding::Gzip);
  EXPECT_EQ(content_coding_of("x-gzip"), ContentCoding::Gzip);
  EXPECT_EQ(content_coding_of("deflate"), ContentCoding::Deflate);
  EXPECT_EQ(content_coding_of("br"), ContentCoding::Unsupported);
  EXPECT_EQ(content_coding_of("gzip, gzip"), ContentCoding::Unsupported);
}

TEST(ContentCoding, RoundTripsUpToTheCapExactly) {
  std::string text;
  for (int i = 0; i < 5000; ++i) text += std::to_string(i * 7919 % 10007) + ",";
  for (auto [coding, bits] : {std::pair{ContentCoding::Gzip, 16 + MAX_WBITS}, std::pair{ContentCoding::Deflate, MAX_WBITS}}) {
    const std::string packed = m3::test::zlib_compress(text, bits);
    EXPECT_EQ(decode_content(coding, packed, text.size()), text);  // exactly at the cap: accepted
    EXPECT_EQ(status_of(coding, packed, text.size() - 1), 413);   // one byte over: refused
  }
  EXPECT_EQ(decode_content(ContentCoding::Identity, "abc", 3), "abc");
}

TEST(ContentCoding, ABombStopsAtTheCap) {
  const std::string bomb = m3::test::zlib_compress(std::string(64 << 20, '\0'), 16 + MAX_WBITS);  // 64 MiB -> ~64 KiB
  ASSERT_LT(bomb.size(), 100u << 10);
  EXPECT_EQ(status_of(ContentCoding::Gzip, bomb, 1 << 20), 413);
}

TEST(ContentCoding, CorruptTruncatedAndTrailingDataAre400) {
  const std::string packed = m3::test::zlib_compress("hello, world", 16 + MAX_WBITS);
  EXPECT_EQ(status_of(ContentCoding::Gzip, packed.substr(0, packed.size() - 6), 1000), 400);  // truncated
  EXPECT_EQ(status_of(ContentCoding::Gzip, packed + "junk", 1000), 400);                    // trailing bytes
  EXPECT_EQ(status_of(ContentCoding::Gzip, "not gzip at all", 1000), 400);
  EXPECT_EQ(status_of(ContentCoding::Deflate, packed, 1000), 400);  // a gzip stream is not zlib's format
  EXPECT_EQ(status_of(ContentCoding::Gzip, "", 1000), 400);
}

}  // namespace
}  // namespace m3::server
