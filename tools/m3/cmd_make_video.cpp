// `m3 make-video`: writes the synthetic test clip (vision/video_encode.h: frame i's left half is a
// flat colour encoding i) with FFmpeg's encoders, for tests, demos and `m3 bench vision`.
#include <cstdio>
#include <memory>
#include <string>

#include "commands.h"
#include "usage.h"
#include "vision/video_encode.h"

namespace m3::cli {

void register_make_video(CLI::App& app) {
  struct Args {
    std::string out, encoder = "libx264";
    int width = 96, height = 64, fps_num = 10, fps_den = 1;
    int64_t frames = 35;
  };
  auto a = std::make_shared<Args>();
  CLI::App* cmd = app.add_subcommand("make-video", "Write a synthetic test clip (frame index encoded as a colour)");
  cmd->add_option("out", a->out, "Output file; the extension picks the container (.mp4, .webm, .mkv, .gif)")->required();
  cmd->add_option("--encoder", a->encoder, "libx264, libvpx-vp9, mpeg4, gif, ffv1, ...")->capture_default_str();
  cmd->add_option("--width", a->width)->capture_default_str()->check(Positive());
  cmd->add_option("--height", a->height)->capture_default_str()->check(Positive());
  cmd->add_option("--frames", a->frames)->capture_default_str()->check(Positive());
  cmd->add_option("--fps", a->fps_num, "Frame rate numerator")->capture_default_str()->check(Positive());
  cmd->add_option("--fps-den", a->fps_den, "Frame rate denominator")->capture_default_str()->check(Positive());
  cmd->callback([a] {
    vision::encode_video_file(a->out, a->encoder, a->width, a->height, a->fps_num, a->fps_den, a->frames,
                              [&](int64_t i) { return vision::test_clip_frame(i, a->width, a->height); });
    std::printf("wrote %s: %s %dx%d, %lld frames at %d/%d fps\n", a->out.c_str(), a->encoder.c_str(), a->width,
                a->height, (long long)a->frames, a->fps_num, a->fps_den);
  });
}

}  // namespace m3::cli
