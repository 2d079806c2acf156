#include "runtime/multimodal_prompt.h"

#include <cstdio>

#include "m3/error.h"
#include "vision/image_decode.h"
#include "vision/preprocess.h"
#include "vision/video_preprocess.h"

namespace m3 {

namespace {

// Preprocessing sizes from the vision config; the rest (bounds, CLIP mean/std) are the spec's.
vision::PreprocessConfig preprocess_config(const VisionConfig& v, bool video) {
  vision::PreprocessConfig pc = video ? vision::PreprocessConfig::video_frames() : vision::PreprocessConfig{};
  pc.patch_size = v.patch_size;
  pc.merge_size = v.spatial_merge_size;
  pc.temporal_patch_size = v.temporal_patch_size;
  return pc;
}

// Decode, preprocess (spec §5.1) and encode one image.
EncodedMedia encode_image(const vision::VisionTower& tower, const MediaInput& in) {
  const std::string& name = in.label();
  const vision::RgbImage img = in.data ? vision::decode_image(in.data, in.size, name) : vision::decode_image_file(in.path);
  vision::PixelValues pv;
  try {
    pv = vision::preprocess_image(img, preprocess_config(tower.config(), false));
  } catch (const Error& e) {
    fail(name, ": ", e.what());
  }
  EncodedMedia e;
  e.layout.kind = vision::MediaKind::Image;
  e.layout.tokens_per_group = tower.merged_tokens(pv.grid);
  e.layout.group_prefix = {""};
  std::fprintf(stderr, "%s: %dx%d, grid_thw %lld %lld %lld, %lld image tokens\n", name.c_str(), img.width,
               img.height, (long long)pv.grid.t, (long long)pv.grid.h, (long long)pv.grid.w,
               (long long)e.layout.tokens_per_group);
  e.features = tower.forward(pv);
  return e;
}

// Decode the sampled frames, preprocess (spec §5.2) and encode one video; one group per grid_t.
EncodedMedia encode_video(const vision::VisionTower& tower, const MediaInput& in, const vision::VideoSamplingConfig& sc) {
  const std::string& name = in.label();
  const vision::VideoSource src =
      in.data ? vision::VideoSource::open_bytes(in.data, in.size, name) : vision::VideoSource::open_file(in.path);
  const vision::VideoInput v = vision::preprocess_video(src, preprocess_config(tower.config(), true), sc);
  EncodedMedia e;
  e.layout.kind = vision::MediaKind::Video;
  const int64_t total = tower.merged_tokens(v.pixels.grid);
  e.layout.tokens_per_group = total / v.pixels.grid.t;
  for (double ts : v.timestamps) e.layout.group_prefix.push_back(vision::timestamp_text(ts));
  std::fprintf(stderr,
               "%s: %s %dx%d, %lld frames at %.3f fps; %zu sampled -> %dx%d, grid_thw %lld %lld %lld, "
               "%lld video tokens\n",
               name.c_str(), src.info().codec.c_str(), src.info().width, src.info().height,
               (long long)src.info().frames, src.info().fps, v.indices.size(), v.size.width, v.size.height,
               (long long)v.pixels.grid.t, (long long)v.pixels.grid.h, (long long)v.pixels.grid.w, (long long)total);
  e.features = tower.forward(v.pixels);
  return e;
}

}  // namespace

EncodedMedia encode_media(const vision::VisionTower& tower, const MediaInput& in, const MultimodalOptions& options) {
  return in.kind == vision::MediaKind::Video ? encode_video(tower, in, options.video) : encode_image(tower, in);
}

namespace {

void check_vision(const Engine& engine) {
  M3_CHECK(engine.config().vision.has_value(), engine.config().source,
           ": images and videos need a checkpoint with a vision tower, but config.json has no vision_config");
  M3_CHECK(engine.config().vision->num_channels == 3, engine.config().source,
           ": images are RGB but vision_config.num_channels is ", engine.config().vision->num_channels);
}

// The engine's tower, or one bound for the rope variant asked for (an opt-in alternative).
std::unique_ptr<vision::VisionTower> tower_for(const Engine& engine, const MultimodalOptions& options,
                                               const vision::VisionTower*& tower) {
  check_vision(engine);
  tower = engine.vision_tower();
  if (options.rope == vision::VisionRopeVariant::NeoxPadded) return nullptr;
  auto own = std::make_unique<vision::VisionTower>(engine.config(), engine.store(), engine.pool(), options.rope);
  tower = own.get();
  return own;
}

}  // namespace

std::shared_ptr<const EncodedMedia> encode_media(const Engine& engine, const MediaInput& in,
                                                 const MultimodalOptions& options) {
  const vision::VisionTower* tower = nullptr;
  const auto own = tower_for(engine, options, tower);
  return std::make_shared<const EncodedMedia>(encode_media(*tower, in, options));
}

MultimodalPrompt build_multimodal_prompt(const Engine& engine, const std::vector<PromptPart>& parts,
                                         const MultimodalOptions& options) {
  const vision::VisionTower* tower = nullptr;
  const auto own = tower_for(engine, options, tower);
  MultimodalPrompt out;
  for (const PromptPart& part : parts) {
    if (!part.media) {
      if (!part.text.empty()) out.prompt.append_tokens(engine.tokenizer().encode(part.text));
      continue;
    }
    out.items.push_back(std::make_shared<const EncodedMedia>(encode_media(*tower, *part.media, options)));
    out.prompt.append_media(engine.tokenizer(), out.items.back());
  }
  return out;
}

MultimodalPrompt build_multimodal_prompt(const Engine& engine, const std::string& text,
                                         const std::vector<std::string>& image_paths,
                                         const std::vector<std::string>& video_paths,
                                         const MultimodalOptions& options) {
  std::vector<PromptPart> parts;
  for (const vision::PromptRef& r : vision::split_placeholders(text, image_paths.size(), video_paths.size())) {
    if (!r.is_media) {
      parts.push_back({r.text, std::nullopt});
      continue;
    }
    MediaInput m;
    m.kind = r.kind;
    m.path = r.kind == vision::MediaKind::Image ? image_paths[r.index] : video_paths[r.index];
    parts.push_back({"", m});
  }
  return build_multimodal_prompt(engine, parts, options);
}

}  // namespace m3
