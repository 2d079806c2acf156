#pragma once
// Images and videos in the token stream (spec §5.3), in the order they appear in the prompt:
//   image: `]<]start of image[>[` + N × `]<]image[>[` + `]<]end of image[>[`
//   video: for each temporal group k: the text `]<]{ts_k:.1f} seconds[>[` tokenized as ordinary
//          text, then `]<]start of image[>[` + M × `]<]video[>[` + `]<]end of image[>[`
//          (videos reuse the image start/end tokens; M = grid_h·grid_w/4).
// The rows of all placeholder tokens of one item, in order, later take that item's merged vision
// features (group k of a video gets rows k·M..(k+1)·M-1 of its features). Token ids come from the
// tokenizer by content. Positions stay plain 1-D.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "m3/tokenizer.h"
#include "m3/media.h"

namespace m3::vision {

inline constexpr const char* kVideoPlaceholder = "]<]video[>[";

// One piece of the prompt in order: text (tokenized as plain text) or a media item.
struct MediaPromptPart {
  std::string text;
  std::optional<MediaLayout> media;
};

struct MediaPrompt {
  std::vector<int32_t> ids;
  std::vector<std::vector<int64_t>> rows;  // per media part, in order: its placeholder positions
};

MediaPrompt build_media_prompt(const Tokenizer& tok, const std::vector<MediaPromptPart>& parts);

// The tokens of one item, appended to `ids`; `rows` gets the positions of its placeholder tokens
// (in `ids`), in feature-row order. The one place that lays out an item's tokens.
void append_media_tokens(const Tokenizer& tok, const MediaLayout& media, std::vector<int32_t>& ids,
                         std::vector<int64_t>& rows);

// The prompt text cut at its `]<]image[>[` and `]<]video[>[` placeholders: text pieces and
// references (kind, index within that kind). The i-th image placeholder is the i-th image, the j-th
// video placeholder the j-th video. A kind with no placeholder in the text has its items appended
// after the text (images, then videos). Throws m3::Error when a kind has placeholders but not one
// per item.
struct PromptRef {
  std::string text;           // when !is_media
  bool is_media = false;
  MediaKind kind = MediaKind::Image;
  size_t index = 0;
};
std::vector<PromptRef> split_placeholders(const std::string& text, size_t images, size_t videos);

}  // namespace m3::vision
