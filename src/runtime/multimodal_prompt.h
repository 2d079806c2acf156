#pragma once
// Text plus images and videos as model input (spec §5): each item is decoded, preprocessed and run
// through the vision tower; the token stream gets its start/placeholder/end tokens (a video: per
// temporal group, its timestamp text first), and the placeholder rows of the input embeddings take
// the merged vision features in order (vision/media_prompt.h). Shared by `m3 logits`,
// `m3 generate` and (through the parts entry) the server.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "runtime/engine.h"
#include "runtime/prompt.h"
#include "vision/media_prompt.h"
#include "vision/video_sampling.h"
#include "vision/vision_tower.h"

namespace m3 {

// One image or video: a file path, or bytes already read (data non-null; `name` is used in errors).
struct MediaInput {
  vision::MediaKind kind = vision::MediaKind::Image;
  std::string path;
  const uint8_t* data = nullptr;
  size_t size = 0;
  std::string name;
  const std::string& label() const { return data ? name : path; }
};

// A prompt given as parts in order (e.g. the content parts of a chat message): text, or media.
struct PromptPart {
  std::string text;
  std::optional<MediaInput> media;
};

struct MultimodalOptions {
  vision::VisionRopeVariant rope = vision::VisionRopeVariant::NeoxPadded;
  vision::VideoSamplingConfig video;
};

struct MultimodalPrompt {
  Prompt prompt;  // the expanded token stream with its media rows (input_rows gives the embeddings)
  std::vector<std::shared_ptr<const EncodedMedia>> items;  // images and videos in stream order
};

// One item decoded, preprocessed and encoded: its token layout (per-group timestamp text for a
// video) and merged features (layout tokens in all groups, hidden). Prompt::append_media or
// append_expanding places it.
EncodedMedia encode_media(const vision::VisionTower& tower, const MediaInput& in, const MultimodalOptions& options = {});
// Same through a vision tower bound for this call; an m3::Error when the checkpoint has none.
std::shared_ptr<const EncodedMedia> encode_media(const Engine& engine, const MediaInput& in,
                                                 const MultimodalOptions& options = {});

// Parts in prompt order. Throws m3::Error naming the file or the field when the checkpoint has no
// vision tower or an item cannot be read.
MultimodalPrompt build_multimodal_prompt(const Engine& engine, const std::vector<PromptPart>& parts,
                                         const MultimodalOptions& options = {});

// Text with `]<]image[>[` / `]<]video[>[` placeholders (vision/media_prompt.h split_placeholders).
MultimodalPrompt build_multimodal_prompt(const Engine& engine, const std::string& text,
                                         const std::vector<std::string>& image_paths,
                                         const std::vector<std::string>& video_paths,
                                         const MultimodalOptions& options = {});

// Images only (the original entry).
MultimodalPrompt build_multimodal_prompt(const Engine& engine, const std::string& text,
                                         const std::vector<std::string>& image_paths,
                                         vision::VisionRopeVariant rope = vision::VisionRopeVariant::NeoxPadded);

}  // namespace m3
