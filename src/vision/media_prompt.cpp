#include "vision/media_prompt.h"

#include "base/error.h"
#include "vision/image_prompt.h"

namespace m3::vision {

MediaPrompt build_media_prompt(const Tokenizer& tok, const std::vector<MediaPromptPart>& parts) {
  const int32_t start = tok.require_token("]<]start of image[>["), end = tok.require_token("]<]end of image[>[");
  MediaPrompt p;
  auto add_text = [&](const std::string& s) {
    if (s.empty()) return;
    const std::vector<int32_t> ids = tok.encode(s);
    p.ids.insert(p.ids.end(), ids.begin(), ids.end());
  };
  size_t item = 0;
  for (const MediaPromptPart& part : parts) {
    if (!part.media) {
      add_text(part.text);
      continue;
    }
    const MediaLayout& m = *part.media;
    ++item;
    M3_CHECK(m.tokens_per_group > 0 && !m.group_prefix.empty(), "vision: media item ", item, " has no tokens");
    const int32_t ph = tok.require_token(m.kind == MediaKind::Image ? kImagePlaceholder : kVideoPlaceholder);
    std::vector<int64_t> rows;
    for (const std::string& prefix : m.group_prefix) {
      add_text(prefix);
      p.ids.push_back(start);
      for (int64_t k = 0; k < m.tokens_per_group; ++k) {
        rows.push_back(int64_t(p.ids.size()));
        p.ids.push_back(ph);
      }
      p.ids.push_back(end);
    }
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
