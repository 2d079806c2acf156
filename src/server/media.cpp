#include "server/media.h"

#include <filesystem>
#include <fstream>

#include "base/error.h"
#include "server/api_error.h"
#include "vision/image_decode.h"
#include "vision/preprocess.h"

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
  std::ifstream in(file, std::ios::binary);
  if (!in) throw ApiError(400, "cannot read media file " + path, param, "invalid_media");
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (bytes.size() > o.max_bytes) throw ApiError(400, str_cat("media file larger than ", o.max_bytes, " bytes"), param, "invalid_media");
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
    const size_t comma = url.find(',');
    if (comma == std::string::npos || url.compare(comma - 7, 7, ";base64") != 0)
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
  const int32_t placeholder = tok.require_token(chat::kImagePlaceholder);
  const int32_t start = tok.require_token("]<]start of image[>[");
  const int32_t end = tok.require_token("]<]end of image[>[");
  const VisionConfig& v = tower.config();
  vision::PreprocessConfig pc;
  pc.patch_size = v.patch_size;
  pc.merge_size = v.spatial_merge_size;
  pc.temporal_patch_size = v.temporal_patch_size;

  std::vector<std::vector<float>> features;
  std::vector<uint64_t> hashes;
  for (const chat::MediaRef& m : media) {
    const std::string param = str_cat("messages[", m.message_index, "].content[", m.part_index, "]");
    if (m.kind != chat::MediaKind::Image)
      throw ApiError(400, "video parts are not supported by m3 serve yet", param, "unsupported_content");
    const std::string bytes = read_media_bytes(m.url, options, param);
    try {
      const vision::RgbImage img =
          vision::decode_image(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size(), param);
      const vision::PixelValues pv = vision::preprocess_image(img, pc);
      features.push_back(tower.forward(pv));
    } catch (const ApiError&) {
      throw;
    } catch (const Error& e) {
      throw ApiError(400, e.what(), param, "invalid_media");
    }
    hashes.push_back(fnv1a(bytes));
  }

  const int64_t H = engine.config.text.hidden_size;
  MediaPrompt out;
  std::vector<std::pair<int64_t, size_t>> rows;  // first row of each image's tokens, image index
  size_t next = 0;
  for (int32_t id : ids) {
    if (id != placeholder) {
      out.ids.push_back(id);
      out.cache_key.push_back(id);
      continue;
    }
    M3_CHECK(next < features.size(), "more image placeholders than image parts");
    const int64_t n = int64_t(features[next].size()) / tower.output_dim();
    out.ids.push_back(start);
    out.cache_key.push_back(start);
    rows.emplace_back(int64_t(out.ids.size()), next);
    for (int64_t j = 0; j < n; ++j) {
      out.ids.push_back(placeholder);
      out.cache_key.push_back(image_row_key(hashes[next], j));
    }
    out.ids.push_back(end);
    out.cache_key.push_back(end);
    ++next;
  }
  M3_CHECK(next == features.size(), "the prompt has ", next, " image placeholders for ", features.size(), " image parts");
  out.embeddings.resize(out.ids.size() * size_t(H));
  engine.model->embed(out.ids.data(), int64_t(out.ids.size()), out.embeddings.data());
  for (const auto& [row0, k] : rows) std::copy(features[k].begin(), features[k].end(), out.embeddings.begin() + row0 * H);
  return out;
}

}  // namespace m3::server
