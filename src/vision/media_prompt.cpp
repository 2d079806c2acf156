#include "vision/media_prompt.h"

#include "m3/error.h"
#include "vision/image_prompt.h"

namespace m3::vision {

void append_media_tokens(const Tokenizer& tok, const MediaLayout& m, std::vector<int32_t>& ids,
                         std::vector<int64_t>& rows) {
  M3_CHECK(m.tokens_per_group > 0 && !m.group_prefix.empty(), "vision: a media item has no tokens");
  const int32_t start = tok.require_token("]<]start of image[>["), end = tok.require_token("]<]end of image[>[");
  const int32_t ph = tok.require_token(m.kind == MediaKind::Image ? kImagePlaceholder : kVideoPlaceholder);
  for (const std::string& prefix : m.group_prefix) {
    if (!prefix.empty()) {  // a video group's timestamp, as plain text
      const std::vector<int32_t> t = tok.encode(prefix);
      ids.insert(ids.end(), t.begin(), t.end());
    }
    ids.push_back(start);
    for (int64_t k = 0; k < m.tokens_per_group; ++k) {
      rows.push_back(int64_t(ids.size()));
      ids.push_back(ph);
    }
    ids.push_back(end);
  }
}

MediaPrompt build_media_prompt(const Tokenizer& tok, const std::vector<MediaPromptPart>& parts) {
  MediaPrompt p;
  for (const MediaPromptPart& part : parts) {
    if (!part.media) {
      if (part.text.empty()) continue;
      const std::vector<int32_t> ids = tok.encode(part.text);
      p.ids.insert(p.ids.end(), ids.begin(), ids.end());
      continue;
    }
    std::vector<int64_t> rows;
    append_media_tokens(tok, *part.media, p.ids, rows);
    p.rows.push_back(std::move(rows));
  }
  return p;
}

std::vector<PromptRef> split_placeholders(const std::string& text, size_t images, size_t videos) {
  const std::string ph[2] = {kImagePlaceholder, kVideoPlaceholder};
  std::vector<PromptRef> out;
  size_t count[2] = {0, 0};
  for (size_t at = 0;;) {
    size_t best = std::string::npos;
    int kind = 0;
    for (int k = 0; k < 2; ++k) {
      const size_t f = text.find(ph[k], at);
      if (f < best) best = f, kind = k;
    }
    if (best == std::string::npos) {
      out.push_back({text.substr(at)});
      break;
    }
    out.push_back({text.substr(at, best - at)});
    out.push_back({"", true, kind == 0 ? MediaKind::Image : MediaKind::Video, count[kind]++});
    at = best + ph[kind].size();
  }
  const size_t given[2] = {images, videos};
  const char* what[2] = {"image", "video"};
  for (int k = 0; k < 2; ++k) {
    if (count[k] == 0) continue;
    M3_CHECK(count[k] == given[k], "the text has ", count[k], " ", ph[k], " placeholder(s) but ", given[k], " ",
             what[k], "(s) were given (one placeholder per ", what[k], ", or none to append them after the text)");
  }
  // Kinds without placeholders go after the text, images first.
  for (int k = 0; k < 2; ++k)
    if (count[k] == 0)
      for (size_t i = 0; i < given[k]; ++i) out.push_back({"", true, k == 0 ? MediaKind::Image : MediaKind::Video, i});
  return out;
}

}  // namespace m3::vision
