#pragma once
// M3 image preprocessing (spec §5.1): smart_resize -> bicubic resize -> rescale + CLIP normalise ->
// temporal pad -> patchify into pixel_values [grid_t*grid_h*grid_w, 1176] and grid_thw.
// A video is the same pipeline over its frames (all resized to one size), so everything below
// takes a list of frames; an image is one frame.
#include <cstdint>
#include <optional>
#include <vector>

#include "vision/image_decode.h"

namespace m3::vision {

struct PreprocessConfig {
  int patch_size = 14;
  int merge_size = 2;           // 2x2 patches merge into one LM token
  int temporal_patch_size = 2;  // frames per temporal patch; an image is padded to 2 frames
  int64_t min_pixels = 3136;    // 4 * 28^2
  int64_t max_pixels = 451584;  // 672^2 (video frames: 602,112)
  int64_t max_aspect_ratio = 200;
  // Opt-in long-side mode (vLLM's max_long_side_pixel): when set, min/max_pixels are not used.
  std::optional<int64_t> max_long_side_pixel;
  int64_t min_short_side_pixel = 112;
  // Long-side mode only: the resized area may not exceed this (images: 3584^2). Unset for video
  // frames, whose cap is volumetric and checked once the frame count is known.
  std::optional<int64_t> max_total_pixels = 12'845'056;
  // CLIP mean/std as the Python config writes them (doubles; the processor rounds them to float32).
  double mean[3] = {0.48145466, 0.4578275, 0.40821073};
  double std[3] = {0.26862954, 0.26130258, 0.27577711};

  // Per-frame settings of the video processor (spec §5.2): a larger area bound, and no per-frame
  // area cap in long-side mode (the video's cap is width*height*frames).
  static PreprocessConfig video_frames() {
    PreprocessConfig c;
    c.max_pixels = 602112;  // 768 * 28^2
    c.max_total_pixels.reset();
    return c;
  }

  int factor() const { return patch_size * merge_size; }
  int patch_values() const { return 3 * temporal_patch_size * patch_size * patch_size; }  // 1176
};

struct ResizedSize {
  int height = 0;
  int width = 0;
};

// Target size, both sides multiples of factor(). Throws m3::Error (naming the size) when the
// aspect ratio exceeds max_aspect_ratio or, in long-side mode, the area exceeds max_total_pixels.
ResizedSize smart_resize(int height, int width, const PreprocessConfig& config);

struct GridThw {
  int64_t t = 0, h = 0, w = 0;  // in patches: frames/2, H'/14, W'/14
  int64_t patches() const { return t * h * w; }
};

struct PixelValues {
  std::vector<float> data;  // [rows, cols] row-major
  int64_t rows = 0;         // grid.patches()
  int64_t cols = 0;         // 1176
  GridThw grid;
  int64_t merged_tokens(int merge_size = 2) const { return rows / (int64_t(merge_size) * merge_size); }
};

// Frames already at their final size (all equal, multiples of factor()). Pads the frame count to a
// multiple of temporal_patch_size by repeating the last frame, normalises, and lays the patches out
// in token order (t, bh, bw, sh, sw) with (c, tp, ph, pw) inside each patch row.
PixelValues patchify(const std::vector<RgbImage>& frames, const PreprocessConfig& config);

// The whole image pipeline: smart_resize, Pillow-exact bicubic resize, patchify.
PixelValues preprocess_image(const RgbImage& image, const PreprocessConfig& config = {});

// The normalised value of 8-bit level v in channel c, as the reference computes it in float32.
float normalize_level(int v, int c, const PreprocessConfig& config);

}  // namespace m3::vision
