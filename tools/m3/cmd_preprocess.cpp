// `m3 preprocess-image`: run the M3 image preprocessing on one file and write pixel_values (.npy)
// and grid_thw, so tests and users can compare against the Python reference.
#include <cstdio>
#include <fstream>
#include <memory>
#include <string>

#include "m3/error.h"
#include "commands.h"
#include "usage.h"
#include "m3/npy.h"
#include "vision/image_decode.h"
#include "vision/preprocess.h"
#include "vision/resize.h"

namespace m3::cli {

void register_preprocess(CLI::App& app);  // declared here until commands.h lists it

namespace {

// Writes the 8-bit image as float32 [H, W, 3] (the .npy writer we have is float32-only; levels are exact).
void write_image_npy(const std::string& path, const vision::RgbImage& img) {
  std::vector<float> v(img.pixels.begin(), img.pixels.end());
  write_npy_f32(path, v.data(), {img.height, img.width, 3});
}

}  // namespace

void register_preprocess(CLI::App& app) {
  struct Args {
    std::string image, out, grid_out, resized_out, decoded_out;
    int64_t max_pixels = 0, min_pixels = 0, max_long_side = 0, max_decode_pixels = 0;
  };
  auto a = std::make_shared<Args>();
  CLI::App* cmd = app.add_subcommand("preprocess-image", "Write an image's M3 pixel_values (.npy) and grid_thw");
  cmd->add_option("image", a->image, "PNG, JPEG, BMP or GIF file")->required();
  cmd->add_option("--out", a->out, "Output .npy, float32 [grid_t*grid_h*grid_w, 1176]")->required();
  cmd->add_option("--grid-out", a->grid_out, "Write \"t h w\" (grid_thw) to this text file");
  cmd->add_option("--max-pixels", a->max_pixels, "smart_resize upper bound on H*W (default 451584)")->check(Positive());
  cmd->add_option("--min-pixels", a->min_pixels, "smart_resize lower bound on H*W (default 3136)")->check(Positive());
  cmd->add_option("--max-long-side", a->max_long_side, "Long-side mode: cap the long side at N pixels")->check(Positive());
  cmd->add_option("--max-decode-pixels", a->max_decode_pixels, "Refuse images with more pixels than this")->check(Positive());
  cmd->add_option("--resized-out", a->resized_out, "Also write the resized RGB image, float32 [H', W', 3] of levels 0..255");
  cmd->add_option("--decoded-out", a->decoded_out, "Also write the decoded RGB image, float32 [H, W, 3]");
  cmd->callback([a] {
    vision::DecodeOptions dopt;
    if (a->max_decode_pixels > 0) dopt.max_pixels = a->max_decode_pixels;
    vision::PreprocessConfig cfg;
    if (a->max_pixels > 0) cfg.max_pixels = a->max_pixels;
    if (a->min_pixels > 0) cfg.min_pixels = a->min_pixels;
    if (a->max_long_side > 0) cfg.max_long_side_pixel = a->max_long_side;
    M3_CHECK(cfg.min_pixels <= cfg.max_pixels, "--min-pixels ", cfg.min_pixels, " exceeds --max-pixels ", cfg.max_pixels);

    const vision::RgbImage image = vision::decode_image_file(a->image, dopt);
    if (!a->decoded_out.empty()) write_image_npy(a->decoded_out, image);
    vision::ResizedSize size;
    try {
      size = vision::smart_resize(image.height, image.width, cfg);
    } catch (const Error& e) {
      fail(a->image, ": ", e.what());
    }
    const vision::RgbImage resized = vision::resize_bicubic(image, size.width, size.height);
    if (!a->resized_out.empty()) write_image_npy(a->resized_out, resized);
    const vision::PixelValues pv = vision::patchify({resized}, cfg);

    write_npy_f32(a->out, pv.data.data(), {pv.rows, pv.cols});
    if (!a->grid_out.empty()) {
      std::ofstream g(a->grid_out);
      g << pv.grid.t << ' ' << pv.grid.h << ' ' << pv.grid.w << '\n';
      M3_CHECK(g.good(), a->grid_out, ": write failed");
    }
    std::printf("%s: %dx%d -> %dx%d, grid_thw %lld %lld %lld, %lld tokens (jpeg decoder: %s)\n", a->image.c_str(),
                image.width, image.height, resized.width, resized.height, (long long)pv.grid.t, (long long)pv.grid.h,
                (long long)pv.grid.w, (long long)pv.merged_tokens(cfg.merge_size), vision::jpeg_decoder_name());
  });
}

}  // namespace m3::cli
