#pragma once
// Which frames of a video the model sees, at what size, and the timestamps it is told (spec §5.2,
// §5.3). Pure arithmetic, no decoding: the same numbers for a file, request bytes or a test.
//
//   indices: frame 0, then next = max(ceil((prev_ts + 1/fps - 1e-4) * src_fps), last + 1) with
//            prev_ts = last / src_fps, until past the last frame (the vLLM loader's rule);
//            a video longer than max_duration is instead sampled at max_duration * fps instants
//            spread evenly over its whole length (vLLM's long-video rule);
//            fewer than min_frames samples (short clips): min(min_frames, frames) evenly spaced;
//            more than max_frames: max_frames of them, evenly spaced.
//   size:    smart_resize of each frame with the video bounds (min 3,136, max 602,112 pixels),
//            the max further capped by total_pixels / frames * 2 (the Qwen-lineage
//            VIDEO_TOTAL_PIXELS rule the processor's total_pixels default comes from); in long-side
//            mode the volume w * h * frames may not exceed 301,056,000.
//   groups:  frames padded to a multiple of temporal_patch_size (2) by repeating the last;
//            grid_t = frames / 2; group k is told "]<]{ts:.1f} seconds[>[" with
//            ts = indices[min(2k, n - 1)] / src_fps.
#include <cstdint>
#include <string>
#include <vector>

#include "vision/preprocess.h"
#include "m3/media.h"

namespace m3::vision {

// Sorted unique indices in [0, total_frames). Throws m3::Error for a non-positive count or rate.
std::vector<int64_t> sample_frame_indices(int64_t total_frames, double src_fps, const VideoSamplingConfig& cfg);

// The size every sampled frame is resized to (all frames share it). `frames` is the sampled count
// before temporal padding. Throws m3::Error (naming the size) for a bad aspect ratio or, in
// long-side mode, a volume above max_volume_pixels.
ResizedSize video_frame_size(int height, int width, int64_t frames, const PreprocessConfig& frame_cfg,
                             const VideoSamplingConfig& cfg);

// Per temporal group k < ceil(n / temporal_patch): indices[min(k * temporal_patch, n - 1)] / src_fps.
std::vector<double> group_timestamps(const std::vector<int64_t>& indices, double src_fps, int temporal_patch);

// "]<]1.5 seconds[>[": Python's f"]<]{ts:.1f} seconds[>[" (correctly rounded, ties on the binary value).
std::string timestamp_text(double seconds);

}  // namespace m3::vision
