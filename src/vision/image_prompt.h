#pragma once
// Images in the token stream (spec §5.3): the text's `]<]image[>[` placeholders (or, when it has
// none, the end of the text) become `]<]start of image[>[` + N × `]<]image[>[` + `]<]end of image[>[`,
// N = the image's merged token count; the N rows then take the vision tower's output in order.
// Positions stay plain 1-D (no M-RoPE in the text model).
#include <cstdint>
#include <string>
#include <vector>

#include "m3/tokenizer.h"

namespace m3::vision {

inline constexpr const char* kImagePlaceholder = "]<]image[>[";

struct ImagePrompt {
  std::vector<int32_t> ids;
  // For each image, the positions of its N image tokens (consecutive), in stream order.
  std::vector<std::vector<int64_t>> image_rows;
};

// Text pieces between placeholders are tokenized as plain text (special strings stay text).
// Throws m3::Error when the text has placeholders but not one per image.
ImagePrompt build_image_prompt(const Tokenizer& tok, const std::string& text,
                               const std::vector<int64_t>& tokens_per_image);

// Overwrites the rows of x (T, dim) at the image positions with the images' embeddings
// (embeddings[i] is (tokens_per_image[i], dim)).
void place_image_embeddings(const ImagePrompt& prompt, const std::vector<std::vector<float>>& embeddings,
                            int64_t dim, float* x);

}  // namespace m3::vision
