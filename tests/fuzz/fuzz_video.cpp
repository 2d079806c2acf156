// Video decoding from bytes (a request's video part): VideoSource::open_bytes probes the
// container with FFmpeg, then decode_frames walks it. Refusal is m3::Error; otherwise the frames
// asked for must arrive, in order, each a well-formed RgbImage. Limits are lowered (1 megapixel
// frames, 2,000 frames) so that a hostile header is refused fast or shows up as a timeout.
#include <cstdint>
#include <vector>

#include "m3/error.h"
#include "fuzz_support.h"
#include "vision/video_decode.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace m3::vision;
  VideoLimits limits;
  limits.max_frame_pixels = 1 << 20;
  limits.max_frames = 2000;
  try {
    const VideoSource video = VideoSource::open_bytes(data, size, "fuzz video", limits);
    const VideoInfo& info = video.info();
    if (info.frames <= 0) return 0;
    // First, middle and last frame: the sampler of the media prompt asks for spread-out indices.
    std::vector<int64_t> wanted = {0};
    if (info.frames > 2) wanted.push_back(info.frames / 2);
    if (info.frames > 1) wanted.push_back(info.frames - 1);
    size_t next = 0;
    video.decode_frames(wanted, [&](int64_t index, RgbImage&& frame) {
      if (next >= wanted.size() || index != wanted[next])
        m3::fuzz::finding(m3::str_cat("frame ", index, " delivered, expected the ", next, "th wanted one"));
      ++next;
      if (frame.width <= 0 || frame.height <= 0 || frame.pixels.size() != size_t(frame.width) * frame.height * 3)
        m3::fuzz::finding(m3::str_cat("frame ", index, ": ", frame.width, "x", frame.height, " with ",
                                      frame.pixels.size(), " bytes"));
    });
    // decode_frames returns only when every wanted frame was handed over.
    if (next != wanted.size())
      m3::fuzz::finding(m3::str_cat(next, " of ", wanted.size(), " wanted frames delivered without an error"));
  } catch (const m3::Error&) {
  }
  return 0;
}
