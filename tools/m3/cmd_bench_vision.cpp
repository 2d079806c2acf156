// m3 bench vision: the vision side's throughput.
//   tower   – whole tower (patch GEMM, pre-LN, layers, projector, merger) of the tiny-vl and small-vl
//             presets on a 672x672 image (2,304 patches, 576 merged tokens): patches/s, tokens/s;
//   m3-layer – one ViT layer at M3's real shape (hidden 1280, 16 heads x 80, MLP 5120, random bf16
//             weights) on the same 2,304 patches, its GFLOP/s against the measured fp32 FMA peak;
//   video   – decode + sampling + preprocessing of a generated 640x360 30 fps H.264 clip: source
//             frames through the decoder per second, and sampled frames per second.
// Random weights are written to a temporary folder (the tower binds mapped tensors like a real
// checkpoint) and removed afterwards.
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <memory>
#include <random>

#include "m3/error.h"
#include "base/machine_bounds.h"
#include "bench_report.h"
#include "bench_util.h"
#include "commands.h"
#include "usage.h"
#include "fixtures/random_checkpoint.h"
#include "io/safetensors.h"
#include "vision/preprocess.h"
#include "vision/video_encode.h"
#include "vision/video_preprocess.h"
#include "vision/vision_attention.h"
#include "vision/vision_tower.h"

namespace m3::cli {

namespace {

// A tower of the given config with random weights, mapped from a file in `dir`.
struct RandomTower {
  TensorStore store;
  std::unique_ptr<vision::VisionTower> tower;
  RandomTower(const ModelConfig& cfg, const std::string& dir, ThreadPool& pool) {
    std::vector<TensorData> tensors;
    add_random_vision_tensors(cfg, 7, tensors);
    const std::string path = dir + "/vision.safetensors";
    write_safetensors(path, tensors);
    store = TensorStore::open_file(path);
    tower = std::make_unique<vision::VisionTower>(cfg, store, pool);
  }
};

vision::PixelValues random_image_pixels(int side) {
  vision::RgbImage img(side, side);
  std::mt19937 rng(3);
  for (uint8_t& v : img.pixels) v = uint8_t(rng() & 255);
  return vision::preprocess_image(img);
}

}  // namespace

void register_bench_vision(CLI::App* bench) {
  struct Args {
    int threads = 0, reps = 3, video_seconds = 20;
    bool skip_m3 = false;
    std::string output = "md";
  };
  auto a = std::make_shared<Args>();
  CLI::App* cmd = bench->add_subcommand("vision", "Vision tower patches/s, one M3-shaped ViT layer, video decode");
  cmd->add_option("-t,--threads", a->threads, "Threads (default: one per usable CPU)");
  cmd->add_option("-r,--reps", a->reps, "Repetitions (median reported)")->capture_default_str()->check(Positive());
  cmd->add_option("--video-seconds", a->video_seconds, "Length of the generated 30 fps clip")
      ->capture_default_str()->check(Positive());
  cmd->add_flag("--skip-m3-layer", a->skip_m3, "Skip the M3-shaped layer (slowest part)");
  add_report_option(cmd, a->output);
  cmd->callback([a] {
    ThreadPool pool(a->threads);
    const std::string dir =
        (std::filesystem::temp_directory_path() / ("m3_bench_vision_" + std::to_string(::getpid()))).string();
    std::filesystem::create_directories(dir);
    struct Cleanup {
      std::string d;
      ~Cleanup() { std::filesystem::remove_all(d); }
    } cleanup{dir};
    const double peak = measure_fma_peak(pool);
    BenchReport report(report_format_of(a->output));
    report.machine_facts(pool.size(), {0, peak});

    const vision::PixelValues pv = random_image_pixels(672);
    const int64_t N = pv.rows, merged = pv.merged_tokens();
    report.table("Vision tower, one 672x672 image", {{"tower", ""}, {"hidden_x_layers", "vision hidden × layers"},
                                                   {"patches", ""}, {"time_s", "time s"}, {"patches_per_s", "patches/s"},
                                                   {"merged_tokens_per_s", "merged tokens/s"}});
    for (const char* preset : {"tiny-vl", "small-vl"}) {
      const ModelConfig cfg = preset_config(preset, 600);
      RandomTower t(cfg, dir, pool);
      const Timing tm = time_runs(a->reps, 1, [&] { t.tower->forward(pv); });
      report.row({preset, std::to_string(cfg.vision->hidden_size) + " × " + std::to_string(cfg.vision->num_hidden_layers),
                  (long long)N, Cell(tm.median, "%.3f"), Cell(N / tm.median, "%.0f"), Cell(merged / tm.median, "%.0f")});
    }

    if (!a->skip_m3) {
      ModelConfig cfg = preset_config("small-vl", 600);
      cfg.vision->hidden_size = 1280;
      cfg.vision->num_attention_heads = 16;
      cfg.vision->intermediate_size = 5120;
      cfg.vision->num_hidden_layers = 1;
      cfg.projector_hidden_size = 64;  // the projector/merger are not timed here
      RandomTower t(cfg, dir, pool);
      const Timing tm = time_runs(a->reps, 1, [&] { t.tower->encode(pv.data.data(), pv.rows, pv.cols, pv.grid); });
      // FLOPs: patch GEMM 2·N·1176·1280; q,k,v,out 4·2·N·1280²; fc1+fc2 2·2·N·1280·5120; scores and
      // weighted sum 2·2·N²·1280 (one segment of N rows).
      const double n = double(N), h = 1280, i = 5120;
      const double gemm = 2 * n * 1176 * h + 8 * n * h * h + 4 * n * h * i, attn = 4 * n * n * h;
      const double gflops = (gemm + attn) / tm.median / 1e9;
      report.table("M3 ViT layer (1280, 16×80, MLP 5120)",
                   {{"part", ""}, {"patches", ""}, {"gflop", "GFLOP"}, {"gemm_gflop", "GEMMs GFLOP"},
                    {"attention_gflop", "attention GFLOP"}, {"time_s", "time s"}, {"gflops", "GFLOP/s"},
                    {"of_peak", "% of peak"}});
      report.row({"patch embed + pre-LN + 1 layer", (long long)N, Cell((gemm + attn) / 1e9), Cell(gemm / 1e9),
                  Cell(attn / 1e9), Cell(tm.median, "%.3f"), Cell(gflops), Cell(100 * gflops / peak, "%.1f%%")});

      // The attention alone (16 heads x 80, one segment of N rows): plain per-row loop vs tiled.
      std::vector<float> q(size_t(N) * 1280), k(q.size()), v(q.size()), o(q.size());
      std::mt19937 rng(5);
      std::normal_distribution<float> nd(0.0f, 1.0f);
      for (auto* buf : {&q, &k, &v})
        for (float& x : *buf) x = nd(rng);
      const std::vector<vision::Segment> seg = {{0, N}};
      const Timing tt = time_runs(a->reps, 1, [&] { vision::vision_attention(pool, q.data(), k.data(), v.data(), N, 16, 80, seg, o.data()); });
      // The plain path is single-threaded; one head of it, scaled to 16 and divided by the threads.
      const Timing tp = time_runs(1, 0, [&] { vision::vision_attention_ref(q.data(), k.data(), v.data(), N, 1, 80, seg, o.data()); });
      const double plain = tp.median * 16 / pool.size();
      report.table("Vision attention 16×80, " + std::to_string(N) + " rows",
                   {{"kernel", ""}, {"gflop", "GFLOP"}, {"time_s", "time s"}, {"gflops", "GFLOP/s"}, {"of_peak", "% of peak"}});
      report.row({"tiled (vision_attention)", Cell(attn / 1e9), Cell(tt.median, "%.3f"), Cell(attn / tt.median / 1e9),
                  Cell(100 * attn / tt.median / 1e9 / peak, "%.1f%%")});
      report.row({"plain per-row loop (1 head timed, ×16 / threads)", Cell(attn / 1e9), Cell(plain, "%.3f"),
                  Cell(attn / plain / 1e9), Cell(100 * attn / plain / 1e9 / peak, "%.1f%%")});
    }

    const std::string clip = dir + "/clip.mp4";
    const int W = 640, H = 360, fps = 30, frames = a->video_seconds * fps;
    vision::encode_video_file(clip, "libx264", W, H, fps, 1, frames,
                              [&](int64_t k) { return vision::test_clip_frame(k, W, H); });
    size_t sampled = 0;
    const Timing tv = time_runs(a->reps, 0, [&] {
      const vision::VideoSource src = vision::VideoSource::open_file(clip);
      sampled = vision::preprocess_video(src).indices.size();
    });
    report.table("Video decode and preprocessing", {{"video", ""}, {"source_frames", "source frames"}, {"sampled", ""},
                                                   {"time_s", "time s"}, {"source_fps", "source frames/s"},
                                                   {"sampled_fps", "sampled frames/s"}});
    char what[160];
    std::snprintf(what, sizeof what, "H.264 %dx%d %d fps, %d s: open + count + decode + sample + resize + patchify", W,
                  H, fps, a->video_seconds);
    report.row({what, frames, (long long)sampled, Cell(tv.median, "%.3f"), Cell(frames / tv.median, "%.0f"),
                Cell(sampled / tv.median)});
    report.finish();
  });
}

}  // namespace m3::cli
