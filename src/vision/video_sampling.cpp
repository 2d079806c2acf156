#include "vision/video_sampling.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <set>

#include "m3/error.h"

namespace m3::vision {
namespace {

// `count` evenly spaced picks from `from` (the first always included): from[floor(i * n / count)].
std::vector<int64_t> evenly(const std::vector<int64_t>& from, int64_t count) {
  const int64_t n = int64_t(from.size());
  std::vector<int64_t> out;
  for (int64_t i = 0; i < count; ++i) out.push_back(from[size_t(i * n / count)]);
  return out;
}

}  // namespace

std::vector<int64_t> sample_frame_indices(int64_t total_frames, double src_fps, const VideoSamplingConfig& cfg) {
  M3_CHECK(total_frames > 0, "video: no frames to sample");
  M3_CHECK(src_fps > 0 && std::isfinite(src_fps), "video: frame rate ", src_fps, " is not positive");
  M3_CHECK(cfg.fps > 0 && cfg.min_frames > 0 && cfg.max_frames >= cfg.min_frames && cfg.max_duration_s > 0,
           "video: bad sampling settings (fps ", cfg.fps, ", frames ", cfg.min_frames, "..", cfg.max_frames,
           ", max duration ", cfg.max_duration_s, " s)");
  const double duration = double(total_frames) / src_fps;
  std::vector<int64_t> idx;
  if (duration <= cfg.max_duration_s) {
    // Step rule: one frame per 1/fps seconds, never the same frame twice.
    idx.push_back(0);
    for (;;) {
      const int64_t last = idx.back();
      const double prev_ts = double(last) / src_fps;
      const int64_t next = std::max(int64_t(std::ceil((prev_ts + 1.0 / cfg.fps - 1e-4) * src_fps)), last + 1);
      if (next >= total_frames) break;
      idx.push_back(next);
    }
  } else {
    // Long video: num_samples instants linspace(0, duration) (endpoint included), each to the
    // frame at ceil(t * src_fps), clamped to the last frame; duplicates dropped.
    const int64_t samples = int64_t(cfg.max_duration_s * cfg.fps);
    if (samples >= total_frames) {
      for (int64_t i = 0; i < total_frames; ++i) idx.push_back(i);
    } else {
      std::set<int64_t> s;
      for (int64_t i = 0; i < samples; ++i) {
        const double t = samples == 1 ? 0.0 : duration * double(i) / double(samples - 1);
        s.insert(std::min(total_frames - 1, int64_t(std::ceil(t * src_fps))));
      }
      idx.assign(s.begin(), s.end());
    }
  }
  if (int64_t(idx.size()) > cfg.max_frames) idx = evenly(idx, cfg.max_frames);
  if (int64_t(idx.size()) < cfg.min_frames && int64_t(idx.size()) < total_frames) {
    std::vector<int64_t> all(static_cast<size_t>(total_frames));
    for (int64_t i = 0; i < total_frames; ++i) all[size_t(i)] = i;
    idx = evenly(all, std::min(cfg.min_frames, total_frames));
  }
  return idx;
}

ResizedSize video_frame_size(int height, int width, int64_t frames, const PreprocessConfig& frame_cfg,
                             const VideoSamplingConfig& cfg) {
  M3_CHECK(frames > 0, "video: no frames");
  PreprocessConfig c = frame_cfg;
  const int tp = c.temporal_patch_size;
  const int64_t padded = (frames + tp - 1) / tp * tp;
  if (c.max_long_side_pixel) {
    const ResizedSize s = smart_resize(height, width, c);
    const int64_t volume = int64_t(s.height) * s.width * padded;
    M3_CHECK(volume <= cfg.max_volume_pixels, "video ", width, "x", height, " resizes to ", s.width, "x", s.height,
             " x ", padded, " frames = ", volume, " pixels, more than the limit of ", cfg.max_volume_pixels);
    return s;
  }
  // max(min(max_pixels, total_pixels / frames * 2), min_pixels * 1.05): integer division is exact
  // for the comparison smart_resize makes (an integer area exceeds x iff it exceeds floor(x)).
  const int64_t budget = cfg.total_pixels * tp / padded;
  c.max_pixels = std::max(std::min(c.max_pixels, budget), int64_t(double(c.min_pixels) * 1.05));
  return smart_resize(height, width, c);
}

std::vector<double> group_timestamps(const std::vector<int64_t>& indices, double src_fps, int temporal_patch) {
  M3_CHECK(!indices.empty() && temporal_patch > 0 && src_fps > 0, "video: no frames for timestamps");
  const int64_t n = int64_t(indices.size()), groups = (n + temporal_patch - 1) / temporal_patch;
  std::vector<double> ts;
  for (int64_t k = 0; k < groups; ++k) ts.push_back(double(indices[size_t(std::min(k * temporal_patch, n - 1))]) / src_fps);
  return ts;
}

std::string timestamp_text(double seconds) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), "]<]%.1f seconds[>[", seconds);
  return buf;
}

}  // namespace m3::vision
