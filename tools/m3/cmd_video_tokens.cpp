// `m3 video-tokens`: the table of sampled frames, frame sizes, grids and token counts for videos of
// given sizes, durations and frame rates, computed by the engine's own sampling and sizing code
// (vision/video_sampling.h). docs/VISION_TOKENS.md's video table is this command's output, and
// tests/integration/test_video_reference.py checks that it still is.
#include <cmath>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "m3/error.h"
#include "commands.h"
#include "vision/video_sampling.h"

namespace m3::cli {

namespace {

std::string with_commas(int64_t v) {
  std::string s = std::to_string(v), out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (i && (s.size() - i) % 3 == 0) out += ',';
    out += s[i];
  }
  return out;
}

}  // namespace

void register_video_tokens(CLI::App& app) {
  struct Args {
    std::vector<std::string> sizes = {"320x240", "640x360", "1280x720", "1920x1080", "3840x2160"};
    std::vector<double> durations = {1, 3.5, 10, 60, 300, 600};
    std::vector<double> sample_fps = {1, 2};
    double src_fps = 30;
  };
  auto a = std::make_shared<Args>();
  CLI::App* cmd = app.add_subcommand("video-tokens", "Print the video token table (sizes x durations x fps)");
  cmd->add_option("--sizes", a->sizes, "Frame sizes WxH")->capture_default_str();
  cmd->add_option("--durations", a->durations, "Durations in seconds")->capture_default_str();
  cmd->add_option("--fps", a->sample_fps, "Sampling rates (frames per second of video)")->capture_default_str();
  cmd->add_option("--src-fps", a->src_fps, "Frame rate of the source videos")->capture_default_str();
  cmd->callback([a] {
    std::printf("| input W×H | duration s | sampled fps | frames sampled | resized W′×H′ | grid_thw | video tokens | "
                "+ start/end |\n|---|---|---|---|---|---|---|---|\n");
    const vision::PreprocessConfig fc = vision::PreprocessConfig::video_frames();
    for (double fps : a->sample_fps)
      for (const std::string& size : a->sizes) {
        int w = 0, h = 0;
        M3_CHECK(std::sscanf(size.c_str(), "%dx%d", &w, &h) == 2 && w > 0 && h > 0, "--sizes: '", size,
                 "' is not WxH");
        for (double d : a->durations) {
          vision::VideoSamplingConfig sc;
          sc.fps = fps;
          const int64_t frames = int64_t(std::llround(d * a->src_fps));
          const std::vector<int64_t> idx = vision::sample_frame_indices(frames, a->src_fps, sc);
          const vision::ResizedSize r = vision::video_frame_size(h, w, int64_t(idx.size()), fc, sc);
          const int64_t t = (int64_t(idx.size()) + 1) / 2, gh = r.height / 14, gw = r.width / 14;
          const int64_t tokens = t * gh * gw / 4;
          std::printf("| %d×%d | %g | %g | %zu | %d×%d | %lld, %lld, %lld | %s | %s |\n", w, h, d, fps, idx.size(),
                      r.width, r.height, (long long)t, (long long)gh, (long long)gw, with_commas(tokens).c_str(),
                      with_commas(tokens + 2 * t).c_str());
        }
      }
  });
}

}  // namespace m3::cli
