#include "runtime/multimodal_prompt.h"

#include <cstdio>

#include "base/error.h"
#include "vision/image_decode.h"
#include "vision/image_prompt.h"
#include "vision/preprocess.h"

namespace m3 {

namespace {

// Decode, preprocess (spec §5.1, sizes from the vision config) and encode one image file.
std::vector<float> image_features(const vision::VisionTower& tower, const std::string& path, int64_t& tokens) {
  const VisionConfig& v = tower.config();
  vision::PreprocessConfig pc;
  pc.patch_size = v.patch_size;
  pc.merge_size = v.spatial_merge_size;
  pc.temporal_patch_size = v.temporal_patch_size;
  M3_CHECK(v.num_channels == 3, path, ": images are RGB but vision_config.num_channels is ", v.num_channels);
  const vision::RgbImage img = vision::decode_image_file(path);
  vision::PixelValues pv;
  try {
    pv = vision::preprocess_image(img, pc);
  } catch (const Error& e) {
    fail(path, ": ", e.what());
  }
  tokens = tower.merged_tokens(pv.grid);
  std::fprintf(stderr, "%s: %dx%d, grid_thw %lld %lld %lld, %lld image tokens\n", path.c_str(), img.width, img.height,
               (long long)pv.grid.t, (long long)pv.grid.h, (long long)pv.grid.w, (long long)tokens);
  return tower.forward(pv);
}

}  // namespace

MultimodalPrompt build_multimodal_prompt(const Engine& engine, const std::string& text,
                                         const std::vector<std::string>& image_paths, vision::VisionRopeVariant rope) {
  M3_CHECK(engine.config.vision.has_value(), engine.config.source,
           ": images need a checkpoint with a vision tower, but config.json has no vision_config");
  vision::VisionTower tower(engine.config, engine.store, *engine.pool, rope);
  MultimodalPrompt out;
  std::vector<int64_t> counts;
  for (const std::string& path : image_paths) {
    int64_t n = 0;
    out.image_features.push_back(image_features(tower, path, n));
    counts.push_back(n);
  }
  const vision::ImagePrompt prompt = vision::build_image_prompt(*engine.tokenizer, text, counts);
  const int64_t H = engine.config.text.hidden_size;
  out.ids = prompt.ids;
  out.embeddings.resize(out.ids.size() * size_t(H));
  engine.model->embed(out.ids.data(), int64_t(out.ids.size()), out.embeddings.data());
  vision::place_image_embeddings(prompt, out.image_features, H, out.embeddings.data());
  return out;
}

}  // namespace m3
