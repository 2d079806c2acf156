#pragma once
// Text plus images as model input (spec §5.3): each image is decoded, preprocessed and run through
// the vision tower; its `]<]image[>[` placeholder in the text (or the end of the text, when there
// is none) becomes start-of-image + N image tokens + end-of-image, and the N rows of the input
// embeddings take the merged vision features in order. Shared by `m3 logits` and `m3 generate`.
#include <cstdint>
#include <string>
#include <vector>

#include "runtime/engine.h"
#include "vision/vision_tower.h"

namespace m3 {

struct MultimodalPrompt {
  std::vector<int32_t> ids;                      // the expanded token stream
  std::vector<float> embeddings;                 // (ids.size(), hidden): token rows + image rows
  std::vector<std::vector<float>> image_features;  // per image (tokens, hidden)
};

// Throws m3::Error naming the file or the field when the checkpoint has no vision tower, an image
// cannot be read, or the placeholders do not match the images.
MultimodalPrompt build_multimodal_prompt(const Engine& engine, const std::string& text,
                                         const std::vector<std::string>& image_paths,
                                         vision::VisionRopeVariant rope = vision::VisionRopeVariant::NeoxPadded);

}  // namespace m3
