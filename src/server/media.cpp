#include "server/media.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <filesystem>

#include "m3/error.h"
#include "server/api_error.h"
#include "m3/media.h"
#include "m3/tokenizer.h"

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

Prompt build_media_prompt(const Engine& engine, const std::vector<int32_t>& ids, const std::vector<chat::MediaRef>& media,
                          const MediaOptions& options) {
  std::vector<std::shared_ptr<const EncodedMedia>> items;
  for (const chat::MediaRef& m : media) {
    const std::string param = str_cat("messages[", m.message_index, "].content[", m.part_index, "]");
    const std::string bytes = read_media_bytes(m.url, options, param);
    MediaInput in;
    in.kind = m.kind == chat::MediaKind::Video ? vision::MediaKind::Video : vision::MediaKind::Image;
    in.data = reinterpret_cast<const uint8_t*>(bytes.data());
    in.size = bytes.size();
    in.name = param;
    try {
      items.push_back(encode_media(engine, in));
    } catch (const ApiError&) {
      throw;
    } catch (const Error& e) {
      throw ApiError(400, e.what(), param, "invalid_media");
    }
  }
  // The template left one placeholder token per part, in order: `]<]image[>[` or `]<]video[>[`.
  Prompt prompt;
  const size_t used = prompt.append_expanding(engine.tokenizer(), ids, items);
  M3_CHECK(used == items.size(), "the prompt has ", used, " media placeholders for ", items.size(), " media parts");
  return prompt;
}

}  // namespace m3::server
