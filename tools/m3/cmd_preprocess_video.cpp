// `m3 preprocess-video`: decode and sample one video as the model would (spec §5.2) and report the
// sampled frame indices, timestamps and grid; optionally write pixel_values, the decoded sampled
// frames (so Python, which has no FFmpeg here, can redo the preprocessing with Pillow) and a JSON
// summary.
#include <cstdio>
#include <fstream>
#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "m3/error.h"
#include "commands.h"
#include "usage.h"
#include "m3/npy.h"
#include "vision/video_preprocess.h"

namespace m3::cli {

void register_preprocess_video(CLI::App& app) {
  struct Args {
    std::string video, out, frames_out, json_out;
    vision::VideoSamplingConfig s;
    int64_t max_long_side = 0;
  };
  auto a = std::make_shared<Args>();
  CLI::App* cmd = app.add_subcommand("preprocess-video", "Sample and preprocess a video; print frame indices, timestamps, grid");
  cmd->add_option("video", a->video, "MP4, WebM, MKV, GIF, ... file")->required();
  cmd->add_option("--out", a->out, "Write pixel_values, float32 [grid_t*grid_h*grid_w, 1176] (.npy)");
  cmd->add_option("--frames-out", a->frames_out, "Write the decoded sampled frames, float32 [n, H, W, 3] of levels 0..255");
  cmd->add_option("--json", a->json_out, "Write a JSON summary (indices, fps, size, grid, timestamps)");
  cmd->add_option("--fps", a->s.fps, "Frames sampled per second")->capture_default_str()->check(Positive());
  cmd->add_option("--min-frames", a->s.min_frames, "Fewest sampled frames")->capture_default_str()->check(Positive());
  cmd->add_option("--max-frames", a->s.max_frames, "Most sampled frames")->capture_default_str()->check(Positive());
  cmd->add_option("--max-duration", a->s.max_duration_s, "Longer videos are sampled evenly at max-duration*fps instants")
      ->capture_default_str()->check(Positive());
  cmd->add_option("--max-long-side", a->max_long_side, "Long-side mode: cap the long side at N pixels")->check(Positive());
  cmd->callback([a] {
    vision::PreprocessConfig cfg = vision::PreprocessConfig::video_frames();
    if (a->max_long_side > 0) cfg.max_long_side_pixel = a->max_long_side;
    const vision::VideoSource src = vision::VideoSource::open_file(a->video);
    std::vector<float> frames;
    int fw = 0, fh = 0;
    const vision::VideoInput v = vision::preprocess_video(src, cfg, a->s, [&](int64_t, const vision::RgbImage& f) {
      if (a->frames_out.empty()) return;
      M3_CHECK(frames.empty() || (f.width == fw && f.height == fh), a->video, ": --frames-out needs frames of one size");
      fw = f.width, fh = f.height;
      frames.insert(frames.end(), f.pixels.begin(), f.pixels.end());
    });
    const vision::VideoInfo& info = v.info;
    const int64_t tokens = v.pixels.merged_tokens(cfg.merge_size);
    std::printf("%s: %s in %s, %dx%d, %lld frames at %.4f fps (%.3f s)\n", a->video.c_str(), info.codec.c_str(),
                info.container.c_str(), info.width, info.height, (long long)info.frames, info.fps, info.duration_s);
    std::printf("sampled %zu frames:", v.indices.size());
    for (int64_t i : v.indices) std::printf(" %lld", (long long)i);
    std::printf("\nresized to %dx%d, grid_thw %lld %lld %lld, %lld video tokens\ntimestamps:", v.size.width,
                v.size.height, (long long)v.pixels.grid.t, (long long)v.pixels.grid.h, (long long)v.pixels.grid.w,
                (long long)tokens);
    for (double ts : v.timestamps) std::printf(" %s", vision::timestamp_text(ts).c_str());
    std::printf("\n");
    if (!a->out.empty()) write_npy_f32(a->out, v.pixels.data.data(), {v.pixels.rows, v.pixels.cols});
    if (!a->frames_out.empty())
      write_npy_f32(a->frames_out, frames.data(), {int64_t(v.indices.size()), fh, fw, 3});
    if (!a->json_out.empty()) {
      nlohmann::json j;
      j["codec"] = info.codec;
      j["container"] = info.container;
      j["width"] = info.width;
      j["height"] = info.height;
      j["frames"] = info.frames;
      j["fps"] = info.fps;
      j["indices"] = v.indices;
      j["resized"] = {v.size.height, v.size.width};
      j["grid_thw"] = {v.pixels.grid.t, v.pixels.grid.h, v.pixels.grid.w};
      j["timestamps"] = v.timestamps;
      std::vector<std::string> texts;
      for (double ts : v.timestamps) texts.push_back(vision::timestamp_text(ts));
      j["timestamp_texts"] = texts;
      j["tokens"] = tokens;
      std::ofstream f(a->json_out);
      f << j.dump(1) << "\n";
      M3_CHECK(f.good(), a->json_out, ": write failed");
    }
  });
}

}  // namespace m3::cli
