#pragma once
// A video file (or bytes) -> pixel_values + grid_thw + the timestamps of its temporal groups:
// open and count frames (video_decode.h), choose the frames and their size (video_sampling.h),
// decode only those frames, resize each with the Pillow-exact bicubic as soon as it is decoded,
// and patchify them as one clip (spec §5.1 steps 3-5, §5.2).
#include <functional>

#include "vision/preprocess.h"
#include "vision/video_decode.h"
#include "vision/video_sampling.h"

namespace m3::vision {

struct VideoInput {
  PixelValues pixels;               // grid.t = ceil(frames / 2) temporal groups
  std::vector<int64_t> indices;     // sampled frame indices (before temporal padding)
  std::vector<double> timestamps;   // per temporal group, seconds
  ResizedSize size;                 // every frame's size after resizing
  VideoInfo info;                   // the source
};

// on_decoded (optional) sees each sampled frame as decoded, before resizing (tests dump them).
// Throws m3::Error naming the video for decoding problems and size limits.
VideoInput preprocess_video(const VideoSource& video, const PreprocessConfig& frame_cfg = PreprocessConfig::video_frames(),
                            const VideoSamplingConfig& sampling = {},
                            const std::function<void(int64_t index, const RgbImage& frame)>& on_decoded = {});

}  // namespace m3::vision
