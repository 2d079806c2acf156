#include "vision/video_preprocess.h"

#include "m3/error.h"
#include "vision/resize.h"

namespace m3::vision {

VideoInput preprocess_video(const VideoSource& video, const PreprocessConfig& frame_cfg,
                            const VideoSamplingConfig& sampling,
                            const std::function<void(int64_t, const RgbImage&)>& on_decoded) {
  VideoInput out;
  out.info = video.info();
  out.indices = sample_frame_indices(out.info.frames, out.info.fps, sampling);
  try {
    out.size = video_frame_size(out.info.height, out.info.width, int64_t(out.indices.size()), frame_cfg, sampling);
  } catch (const Error& e) {
    fail(video.name(), ": ", e.what());
  }
  // Only the resized frames are kept (at most max_pixels each), never the decoded ones.
  std::vector<RgbImage> frames;
  frames.reserve(out.indices.size());
  video.decode_frames(out.indices, [&](int64_t index, RgbImage&& frame) {
    if (on_decoded) on_decoded(index, frame);
    if (frame.width == out.size.width && frame.height == out.size.height)
      frames.push_back(std::move(frame));
    else
      frames.push_back(resize_bicubic(frame, out.size.width, out.size.height));
  });
  out.pixels = patchify(frames, frame_cfg);
  out.timestamps = group_timestamps(out.indices, out.info.fps, frame_cfg.temporal_patch_size);
  return out;
}

}  // namespace m3::vision
