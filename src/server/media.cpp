#include "server/media.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <filesystem>

#include "base/error.h"
#include "server/api_error.h"
#include "runtime/multimodal_prompt.h"

namespace m3::server {

namespace {

int base64_value(char c) {
  if (c >= 'A' && c <= 'Z') return c - 'A';
  if (c >= 'a' && c <= 'z') return c - 'a' + 26;
  if (c >= '0' && c <= '9') return c - '0' + 52;
  if (c == '+') return 62;
  if (c == '/') return 63;
  return -1;
}

uint64_t fnv1a(const std::string& bytes) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : bytes) h = (h ^ c) * 1099511628211ull;
  return h;
}

// A negative cache-key value for row `row` of an image with content hash h (token ids are >= 0).
int32_t image_row_key(uint64_t h, int64_t row) {
  uint64_t x = h + uint64_t(row) * 0x9E3779B97F4A7C15ull;
  x ^= x >> 31;
  x *= 0xBF58476D1CE4E5B9ull;
  x ^= x >> 29;
  return -1 - int32_t(x % 2147483646ull);
}

std::string read_local(const std::string& path, const MediaOptions& o, const std::string& param) {
  if (o.allowed_local_dir.empty())
    throw ApiError(400, "local media paths are disabled: send a data: URL, or start the server with --allowed-local-media-path DIR",
                   param, "invalid_media");
  namespace fs = std::filesystem;
  std::error_code ec;
  const fs::path root = fs::weakly_canonical(o.allowed_local_dir, ec);
  const fs::path file = fs::weakly_canonical(path, ec);
  const std::string r = root.string(), f = file.string();
  const bool inside = !ec && f.size() > r.size() && f.compare(0, r.size(), r) == 0 && (r.back() == '/' || f[r.size()] == '/');
  if (!inside) throw ApiError(400, "media path is outside --allowed-local-media-path", param, "invalid_media");
  // Only a regular file: a FIFO would block this thread until a writer came, a device could be
  // read forever. O_NONBLOCK makes the open itself return at once for a FIFO; fstat then decides
  // on the opened file (no race between a check and the open).
  const int fd = ::open(file.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC | O_NOCTTY);
  if (fd < 0) throw ApiError(400, "cannot read media file " + path, param, "invalid_media");
  struct Closer {
    int fd;
    ~Closer() { ::close(fd); }
  } closer{fd};
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode))
    throw ApiError(400, "media path " + path + " is not a regular file", param, "invalid_media");
  if (uint64_t(st.st_size) > o.max_bytes)
    throw ApiError(400, str_cat("media file larger than ", o.max_bytes, " bytes"), param, "invalid_media");
  // A regular file on a stalled network mount can still be slow: give up after the deadline.
  const auto deadline = std::chrono::steady_clock::now() + o.read_deadline;
  std::string bytes(size_t(st.st_size), '\0');
  size_t got = 0;
  while (got < bytes.size()) {
    const ssize_t n = ::read(fd, bytes.data() + got, bytes.size() - got);
    if (n < 0 && (errno == EINTR || errno == EAGAIN)) continue;
    if (n < 0) throw ApiError(400, "cannot read media file " + path, param, "invalid_media");
    if (n == 0) break;  // the file shrank while we read it
    got += size_t(n);
    if (std::chrono::steady_clock::now() > deadline)
      throw ApiError(400, "reading media file " + path + " took longer than the deadline", param, "invalid_media");
  }
  bytes.resize(got);
  return bytes;
}

}  // namespace

bool decode_base64(std::string_view in, std::string& out) {
  out.clear();
  out.reserve(in.size() / 4 * 3);
  uint32_t acc = 0;
  int bits = 0;
  size_t pad = 0;
  for (char c : in) {
    if (c == ' ' || c == '\n' || c == '\r' || c == '\t') continue;
    if (c == '=') {
      ++pad;
      continue;
    }
    const int v = base64_value(c);
    if (v < 0 || pad > 0) return false;  // bad character, or data after padding
    acc = (acc << 6) | uint32_t(v);
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out.push_back(char((acc >> bits) & 0xFF));
    }
  }
  return pad <= 2 && bits < 6;
}

std::string read_media_bytes(const std::string& url, const MediaOptions& o, const std::string& param) {
  if (url.rfind("data:", 0) == 0) {
    // data:<mime>;base64,<data>: the header (between "data:" and the first comma) must end in
    // ";base64". The header can be shorter than ";base64" itself ("data:,AAAA").
    const size_t comma = url.find(',');
    const std::string_view header =
        comma == std::string::npos ? std::string_view() : std::string_view(url).substr(5, comma - 5);
    if (comma == std::string::npos || !header.ends_with(";base64"))
      throw ApiError(400, "expected a data URL of the form data:<mime>;base64,<data>", param, "invalid_media");
    std::string bytes;
    if (!decode_base64(std::string_view(url).substr(comma + 1), bytes))
      throw ApiError(400, "the data URL is not valid base64", param, "invalid_media");
    if (bytes.size() > o.max_bytes) throw ApiError(400, str_cat("media larger than ", o.max_bytes, " bytes"), param, "invalid_media");
    return bytes;
  }
  if (url.rfind("http://", 0) == 0 || url.rfind("https://", 0) == 0)
    throw ApiError(400, "remote media URLs are not fetched by this server: send the bytes as a data: URL", param, "invalid_media");
  if (url.empty()) throw ApiError(400, "file_id media is not supported: send a data: URL", param, "invalid_media");
  if (url.rfind("file://", 0) == 0) return read_local(url.substr(7), o, param);
  return read_local(url, o, param);
}

MediaPrompt build_media_prompt(const Engine& engine, const vision::VisionTower& tower, const std::vector<int32_t>& ids,
                               const std::vector<chat::MediaRef>& media, const MediaOptions& options) {
  const Tokenizer& tok = *engine.tokenizer;
  const int32_t image = tok.require_token(chat::kImagePlaceholder);
  const int32_t video = tok.require_token(chat::kVideoPlaceholder);
  const int32_t start = tok.require_token("]<]start of image[>[");
  const int32_t end = tok.require_token("]<]end of image[>[");

  std::vector<EncodedMedia> items;
  std::vector<uint64_t> hashes;
  for (const chat::MediaRef& m : media) {
    const std::string param = str_cat("messages[", m.message_index, "].content[", m.part_index, "]");
    const std::string bytes = read_media_bytes(m.url, options, param);
    MediaInput in;
    in.kind = m.kind == chat::MediaKind::Video ? vision::MediaKind::Video : vision::MediaKind::Image;
    in.data = reinterpret_cast<const uint8_t*>(bytes.data());
    in.size = bytes.size();
    in.name = param;
    try {
      items.push_back(encode_media(tower, in));
    } catch (const ApiError&) {
      throw;
    } catch (const Error& e) {
      throw ApiError(400, e.what(), param, "invalid_media");
    }
    hashes.push_back(fnv1a(bytes));
  }

  // The template left one placeholder token per part, in order: `]<]image[>[` or `]<]video[>[`.
  const int64_t H = engine.config.text.hidden_size;
  MediaPrompt out;
  struct Run {
    int64_t first_row;  // of a run of vision tokens (one image, or one group of a video)
    const float* features;
    int64_t count;
  };
  std::vector<Run> runs;
  size_t next = 0;
  for (int32_t id : ids) {
    if (id != image && id != video) {
      out.ids.push_back(id);
      out.cache_key.push_back(id);
      continue;
    }
    M3_CHECK(next < items.size(), "more media placeholders than media parts");
    const EncodedMedia& item = items[next];
    M3_CHECK((id == video) == (item.layout.kind == vision::MediaKind::Video), "media placeholder ", next,
             " does not match its part's kind");
    const int64_t per_group = item.layout.tokens_per_group;
    int64_t row = 0;
    for (const std::string& prefix : item.layout.group_prefix) {
      for (int32_t t : tok.encode(prefix)) {  // a video group's timestamp, as plain text
        out.ids.push_back(t);
        out.cache_key.push_back(t);
      }
      out.ids.push_back(start);
      out.cache_key.push_back(start);
      runs.push_back(Run{int64_t(out.ids.size()), item.features.data() + row * H, per_group});
      for (int64_t j = 0; j < per_group; ++j, ++row) {
        out.ids.push_back(id);
        out.cache_key.push_back(image_row_key(hashes[next], row));
      }
      out.ids.push_back(end);
      out.cache_key.push_back(end);
    }
    ++next;
  }
  M3_CHECK(next == items.size(), "the prompt has ", next, " media placeholders for ", items.size(), " media parts");
  out.embeddings.resize(out.ids.size() * size_t(H));
  engine.model->embed(out.ids.data(), int64_t(out.ids.size()), out.embeddings.data());
  for (const Run& r : runs) std::copy(r.features, r.features + r.count * H, out.embeddings.begin() + r.first_row * H);
  return out;
}

}  // namespace m3::server
