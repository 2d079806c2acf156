#pragma once
// Images and videos as model input (spec §5): what a client hands the engine and what the vision
// tower gives back. Prompt (m3/prompt.h) places an encoded item's rows in a prompt.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace m3::vision {

enum class MediaKind { Image, Video };

// The tokens of one item (spec §5.3): per group, prefix text, start, tokens_per_group placeholders, end.
struct MediaLayout {
  MediaKind kind = MediaKind::Image;
  int64_t tokens_per_group = 0;            // N for an image, M for a video
  std::vector<std::string> group_prefix;   // one entry per group ("" for an image: one group)
};

// Frame sampling of a video (spec §5.2).
struct VideoSamplingConfig {
  double fps = 1.0;             // frames sampled per second of video
  int64_t min_frames = 4;
  int64_t max_frames = 768;
  double max_duration_s = 300;  // longer videos: max_duration * fps samples over the whole video
  int64_t total_pixels = 45'158'400;            // w * h * frames budget of the default mode
  int64_t max_volume_pixels = 301'056'000;      // w * h * frames cap of long-side mode
};

// Which 3D RoPE (spec §5.4.4 and open question 5).
enum class VisionRopeVariant {
  // The spec's choice (vLLM, llama.cpp): axis = 2·((head_dim/3)/2) dims for each of t, h, w;
  // angle vector a = [t·f, h·f, w·f] (half = 3·axis/2 values), f_k = theta^(−2k/axis);
  // NeoX pairs (j, j + half); dims ≥ 2·half pass through (M3: 26/26/26 + 2).
  NeoxPadded,
  // The transformers port (non-authoritative, opt-in): t and h get axis dims, w the rest
  // (M3: 26/26/28, nothing passes through); each axis block [b, b + n) rotates interleaved pairs
  // (b + 2k, b + 2k + 1) by coord·theta^(−2k/n). Coordinates are the same true (t, row, col).
  InterleavedHf,
};

}  // namespace m3::vision

namespace m3 {

class Engine;

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

// One image or video through the vision tower: its token layout (per-group timestamp text for a
// video) and merged features (layout tokens in all groups, hidden).
struct EncodedMedia {
  vision::MediaLayout layout;
  std::vector<float> features;
};

// Decodes, preprocesses (spec §5.1, §5.2) and encodes one item. Throws m3::Error naming the file
// (or `name`) when the checkpoint has no vision tower or the item cannot be read.
std::shared_ptr<const EncodedMedia> encode_media(const Engine& engine, const MediaInput& in,
                                                 const MultimodalOptions& options = {});

}  // namespace m3
