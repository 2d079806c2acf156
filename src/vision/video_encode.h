#pragma once
// Writes RGB frames to a video file with FFmpeg's libraries (container from the file extension:
// .mp4, .webm, .mkv, .gif, ...). Used to make test and benchmark clips in-process, so no test
// depends on a binary video checked into the repository or on the ffmpeg program.
#include <cstdint>
#include <functional>
#include <string>

#include "vision/image_decode.h"

namespace m3::vision {

// Encodes `count` frames of width x height at fps_num/fps_den frames per second with the named
// encoder ("libx264", "libvpx-vp9", "mpeg4", "gif", "ffv1", ...); frame_at(i) gives frame i.
// Throws m3::Error naming the file or the encoder when it is unavailable or writing fails.
void encode_video_file(const std::string& path, const std::string& encoder, int width, int height, int fps_num,
                       int fps_den, int64_t count, const std::function<RgbImage(int64_t)>& frame_at);

// Whether this libavcodec has the named encoder (tests skip the formats it lacks).
bool has_video_encoder(const std::string& encoder);

}  // namespace m3::vision

namespace m3::vision {

// The synthetic test clip: frame i's left half is one flat colour that encodes i
// (R = (i mod 6)·51, G = (⌊i/6⌋ mod 6)·51, B = (⌊i/36⌋ mod 6)·51; neighbouring frames differ by 51
// levels, far above codec error), its right half a smooth pattern that moves with i.
void test_clip_color(int64_t i, uint8_t rgb[3]);
RgbImage test_clip_frame(int64_t i, int width, int height);

}  // namespace m3::vision
