#pragma once
// Video files -> 8-bit RGB frames, decoded in-process with FFmpeg's libraries (libavformat demuxes,
// libavcodec decodes, libswscale converts to RGB24). MP4/H.264, WebM/VP9, MKV, animated GIF and
// whatever else the installed libavformat/libavcodec read.
//
// Streaming: a video is never held whole. Opening walks the packets once (no decoding) to count the
// frames; decode_frames() then walks them again, decodes, and hands over only the frames whose
// index the caller asked for. Frame index = position in presentation order (the i-th frame the
// decoder outputs), as the reference loader counts; timestamps are index / fps.
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "vision/image_decode.h"

namespace m3::vision {

// Refused before decoding (oversized inputs would otherwise cost minutes or gigabytes).
struct VideoLimits {
  int64_t max_frame_pixels = 8192LL * 8192;  // width * height of the coded frames
  int64_t max_frames = 500'000;              // frames in the stream
  double max_duration_s = 6.0 * 3600;        // frames / fps
};

struct VideoInfo {
  int width = 0, height = 0;  // coded frame size
  double fps = 0;             // average frame rate of the stream
  int64_t frames = 0;         // counted packets of the video stream
  double duration_s = 0;      // frames / fps
  std::string codec;          // e.g. "h264", "vp9", "gif"
  std::string container;      // e.g. "mov,mp4,m4a,3gp,3g2,mj2"
};

class VideoSource {
 public:
  // Opens and probes; throws m3::Error naming the file (or `name`) when it cannot be read, is not a
  // video, has no video stream or no decoder for it, is corrupt or truncated, or exceeds the limits.
  static VideoSource open_file(const std::string& path, const VideoLimits& limits = {});
  // Same from bytes already in memory (a request body); `data` must outlive the VideoSource.
  static VideoSource open_bytes(const uint8_t* data, size_t size, const std::string& name,
                                const VideoLimits& limits = {});
  VideoSource(VideoSource&&) noexcept;
  VideoSource& operator=(VideoSource&&) noexcept;
  ~VideoSource();

  const VideoInfo& info() const;
  const std::string& name() const;

  // Decodes from the start and calls on_frame(index, frame) for each index in `wanted` (sorted,
  // unique, each < info().frames), in order. Throws m3::Error naming the file when a frame cannot
  // be decoded or the stream ends before the last wanted index.
  void decode_frames(const std::vector<int64_t>& wanted,
                     const std::function<void(int64_t index, RgbImage&& frame)>& on_frame) const;

 private:
  struct Impl;
  explicit VideoSource(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace m3::vision
