// Video input (spec §5.2, §5.3): frame sampling and sizes on hand-worked cases, timestamps, the
// token layout, and FFmpeg decoding of clips encoded here (MP4/H.264, WebM/VP9, MKV, GIF) whose
// frames carry their index as a colour, plus clear errors for broken or oversized files.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <random>

#include "m3/error.h"
#include "fixtures/bpe_trainer.h"
#include "fixtures/random_checkpoint.h"
#include "runtime/multimodal_prompt.h"
#include "m3/tokenizer.h"
#include "vision/media_prompt.h"
#include "vision/video_decode.h"
#include "vision/video_encode.h"
#include "vision/video_preprocess.h"
#include "vision/video_sampling.h"

namespace m3::vision {
namespace {

using Idx = std::vector<int64_t>;

std::string message_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

TEST(VideoSampling, StepRuleOnHandCases) {
  VideoSamplingConfig c;
  // 3.5 s at 10 fps: ceil((0 + 1 - 1e-4) * 10) = 10, then 20, 30; 40 is past the end.
  EXPECT_EQ(sample_frame_indices(35, 10, c), (Idx{0, 10, 20, 30}));
  // 36 frames: frame 35 is 3.5 s, still no 4th second.
  EXPECT_EQ(sample_frame_indices(41, 10, c), (Idx{0, 10, 20, 30, 40}));
  c.fps = 4;  // step 2.5 frames: ceil(2.499) = 3, ceil(5.499) = 6, ...
  EXPECT_EQ(sample_frame_indices(35, 10, c), (Idx{0, 3, 6, 9, 12, 15, 18, 21, 24, 27, 30, 33}));
  c.fps = 1.5;  // step 6.67 frames: 7, 14, 21, 28; ceil(34.999) = 35 is past the end
  EXPECT_EQ(sample_frame_indices(35, 10, c), (Idx{0, 7, 14, 21, 28}));
  // NTSC 29.97 fps: the 1e-4 slack keeps whole seconds on frame 30k/1001 boundaries.
  c.fps = 1;
  const Idx ntsc = sample_frame_indices(300, 30000.0 / 1001.0, c);
  ASSERT_EQ(ntsc.size(), 10u);  // 300 frames end at 9.977 s
  for (size_t k = 1; k < ntsc.size(); ++k)
    EXPECT_EQ(ntsc[k], int64_t(std::ceil((double(ntsc[k - 1]) * 1001.0 / 30000.0 + 1 - 1e-4) * 30000.0 / 1001.0)));
  // src fps below the sampling rate: last + 1 wins, every frame once.
  c.fps = 8;
  EXPECT_EQ(sample_frame_indices(6, 2, c), (Idx{0, 1, 2, 3, 4, 5}));
}

TEST(VideoSampling, MinMaxFramesAndLongVideos) {
  VideoSamplingConfig c;
  // 1 s at 10 fps gives only frame 0: min_frames 4 spreads 4 frames evenly instead.
  EXPECT_EQ(sample_frame_indices(10, 10, c), (Idx{0, 2, 5, 7}));
  EXPECT_EQ(sample_frame_indices(3, 10, c), (Idx{0, 1, 2}));  // fewer frames than min_frames: all
  c.max_frames = 3;
  c.min_frames = 1;
  EXPECT_EQ(sample_frame_indices(35, 10, c), (Idx{0, 10, 20}));
  // 400 s at 30 fps is longer than max_duration 300: 300 instants over the whole video.
  c = VideoSamplingConfig{};
  const Idx lv = sample_frame_indices(12000, 30, c);
  EXPECT_EQ(lv.size(), 300u);
  EXPECT_EQ(lv.front(), 0);
  EXPECT_EQ(lv.back(), 11999);
  for (size_t k = 1; k < lv.size(); ++k) EXPECT_GT(lv[k], lv[k - 1]);
  // Exactly max_duration: the step rule (300 samples, one per second).
  const Idx five_min = sample_frame_indices(9000, 30, c);
  EXPECT_EQ(five_min.size(), 300u);
  EXPECT_EQ(five_min[299], 8970);
  EXPECT_NE(message_of([] { sample_frame_indices(0, 30, {}); }).find("no frames"), std::string::npos);
}

TEST(VideoSampling, FrameSizeUsesVideoBoundsAndTotalPixels) {
  const PreprocessConfig fc = PreprocessConfig::video_frames();
  const VideoSamplingConfig c;
  const ResizedSize small = video_frame_size(64, 96, 4, fc, c);  // round(64/28)=2, round(96/28)=3
  EXPECT_EQ(small.height, 56);
  EXPECT_EQ(small.width, 84);
  // A 1080p frame alone is bounded by 602,112 pixels (images: 451,584).
  const ResizedSize one = video_frame_size(1080, 1920, 2, fc, c);
  EXPECT_EQ(one.height, 560);  // beta = sqrt(1080*1920/602112): floor(20.8)*28, floor(36.9)*28
  EXPECT_EQ(one.width, 1008);
  EXPECT_LE(int64_t(one.height) * one.width, 602112);
  // 300 frames: budget 45,158,400 * 2 / 300 = 301,056 per frame; beta = sqrt(1080*1920/301056),
  // floor(1080/beta/28)*28 = 392, floor(1920/beta/28)*28 = 728.
  const ResizedSize many = video_frame_size(1080, 1920, 300, fc, c);
  EXPECT_EQ(many.height, 392);
  EXPECT_EQ(many.width, 728);
  // The budget never goes below min_pixels * 1.05.
  const ResizedSize tiny = video_frame_size(1080, 1920, 100000, fc, c);
  EXPECT_LE(int64_t(tiny.height) * tiny.width, 3292);
  // Long-side mode: the volume cap w*h*frames.
  PreprocessConfig ls = fc;
  ls.max_long_side_pixel = 1008;
  const ResizedSize l = video_frame_size(1080, 1920, 10, ls, c);
  EXPECT_EQ(l.width, 1008);
  EXPECT_NE(message_of([&] { video_frame_size(1080, 1920, 768, ls, c); }).find("more than the limit of 301056000"),
            std::string::npos);
}

TEST(VideoSampling, TimestampsAndText) {
  EXPECT_EQ(group_timestamps({0, 10, 20, 30}, 10, 2), (std::vector<double>{0.0, 2.0}));
  // Odd count: the last group's first frame is the last sampled frame.
  EXPECT_EQ(group_timestamps({0, 7, 14, 21, 28}, 10, 2), (std::vector<double>{0.0, 1.4, 2.8}));
  EXPECT_EQ(timestamp_text(0.0), "]<]0.0 seconds[>[");
  EXPECT_EQ(timestamp_text(2.8), "]<]2.8 seconds[>[");
  EXPECT_EQ(timestamp_text(0.25), "]<]0.2 seconds[>[");  // Python: f"{0.25:.1f}" == "0.2" (binary tie, to even)
  EXPECT_EQ(timestamp_text(0.35), "]<]0.3 seconds[>[");  // 0.35 is 0.34999... in binary
  EXPECT_EQ(timestamp_text(299.96), "]<]300.0 seconds[>[");
}

TEST(MediaPrompt, VideoGroupsWithTimestampsAndMixedOrder) {
  auto tok = Tokenizer::from_json_text(make_small_tokenizer_json(50), "small");
  const int32_t start = tok->require_token("]<]start of image[>["), end = tok->require_token("]<]end of image[>["),
                img = tok->require_token("]<]image[>["), vid = tok->require_token("]<]video[>[");
  MediaLayout video{MediaKind::Video, 3, {"]<]0.0 seconds[>[", "]<]2.0 seconds[>["}};
  MediaLayout image{MediaKind::Image, 2, {""}};
  const MediaPrompt p = build_media_prompt(*tok, {{"A", std::nullopt}, {"", video}, {"B", std::nullopt}, {"", image}});
  std::vector<int32_t> want = tok->encode("A");
  for (const char* ts : {"]<]0.0 seconds[>[", "]<]2.0 seconds[>["}) {
    const std::vector<int32_t> t = tok->encode(ts);  // plain text, not a special token
    want.insert(want.end(), t.begin(), t.end());
    want.insert(want.end(), {start, vid, vid, vid, end});
  }
  const std::vector<int32_t> b = tok->encode("B");
  want.insert(want.end(), b.begin(), b.end());
  want.insert(want.end(), {start, img, img, end});
  EXPECT_EQ(p.ids, want);
  ASSERT_EQ(p.rows.size(), 2u);
  ASSERT_EQ(p.rows[0].size(), 6u);
  for (int64_t r : p.rows[0]) EXPECT_EQ(p.ids[size_t(r)], vid);
  for (int64_t r : p.rows[1]) EXPECT_EQ(p.ids[size_t(r)], img);
  EXPECT_EQ(p.rows[0][3], p.rows[0][2] + 3 + int64_t(tok->encode("]<]2.0 seconds[>[").size()));
}

TEST(MediaPrompt, PlaceholdersPerKind) {
  // Each kind in its own order; a kind without placeholders goes after the text.
  auto r = split_placeholders("x ]<]video[>[ y ]<]image[>[ z ]<]video[>[", 1, 2);
  ASSERT_EQ(r.size(), 7u);
  EXPECT_TRUE(r[1].is_media && r[1].kind == MediaKind::Video && r[1].index == 0);
  EXPECT_TRUE(r[3].is_media && r[3].kind == MediaKind::Image && r[3].index == 0);
  EXPECT_TRUE(r[5].is_media && r[5].kind == MediaKind::Video && r[5].index == 1);
  r = split_placeholders("look ]<]image[>[", 1, 1);
  ASSERT_EQ(r.size(), 4u);
  EXPECT_TRUE(r[3].is_media && r[3].kind == MediaKind::Video);
  r = split_placeholders("plain", 1, 1);
  ASSERT_EQ(r.size(), 3u);
  EXPECT_TRUE(r[1].kind == MediaKind::Image && r[2].kind == MediaKind::Video);
  EXPECT_NE(message_of([] { split_placeholders("]<]video[>[", 0, 2); }).find("1 ]<]video[>[ placeholder(s) but 2"),
            std::string::npos);
}

// ---- decoding -------------------------------------------------------------------------------

constexpr int kW = 96, kH = 64, kFrames = 35;

std::string scratch(const std::string& name) {
  const auto dir = std::filesystem::temp_directory_path() / ("m3_video_test_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  return (dir / name).string();
}

std::string make_clip(const std::string& name, const std::string& encoder) {
  const std::string path = scratch(name);
  encode_video_file(path, encoder, kW, kH, 10, 1, kFrames, [](int64_t i) { return test_clip_frame(i, kW, kH); });
  return path;
}

// Mean colour of the interior of the left half (the flat index colour, away from block edges).
void id_color(const RgbImage& f, double out[3]) {
  double s[3] = {0, 0, 0};
  int n = 0;
  for (int y = 8; y < f.height - 8; ++y)
    for (int x = 8; x < f.width / 2 - 8; ++x, ++n)
      for (int c = 0; c < 3; ++c) s[c] += f.row(y)[3 * x + c];
  for (int c = 0; c < 3; ++c) out[c] = s[c] / n;
}

void expect_frames(const std::string& path, double tolerance) {
  SCOPED_TRACE(path);
  const VideoSource v = VideoSource::open_file(path);
  EXPECT_EQ(v.info().width, kW);
  EXPECT_EQ(v.info().height, kH);
  EXPECT_EQ(v.info().frames, kFrames);
  EXPECT_NEAR(v.info().fps, 10.0, 1e-9);
  std::vector<int64_t> seen;
  const VideoInput in = preprocess_video(v, PreprocessConfig::video_frames(), {}, [&](int64_t i, const RgbImage& f) {
    seen.push_back(i);
    ASSERT_EQ(f.width, kW);
    double got[3];
    id_color(f, got);
    uint8_t want[3];
    test_clip_color(i, want);
    for (int c = 0; c < 3; ++c) EXPECT_NEAR(got[c], want[c], tolerance) << "frame " << i << " channel " << c;
  });
  EXPECT_EQ(seen, (Idx{0, 10, 20, 30}));
  EXPECT_EQ(in.indices, seen);
  EXPECT_EQ(in.timestamps, (std::vector<double>{0.0, 2.0}));
  EXPECT_EQ(in.pixels.grid.t, 2);
  EXPECT_EQ(in.pixels.grid.h, 4);  // 56 / 14
  EXPECT_EQ(in.pixels.grid.w, 6);  // 84 / 14
  EXPECT_EQ(in.pixels.rows, 48);
}

TEST(VideoDecode, Mp4H264) {
  if (!has_video_encoder("libx264")) GTEST_SKIP() << "no libx264 encoder in this libavcodec";
  expect_frames(make_clip("clip.mp4", "libx264"), 6);
}
TEST(VideoDecode, WebmVp9) {
  if (!has_video_encoder("libvpx-vp9")) GTEST_SKIP() << "no libvpx-vp9 encoder in this libavcodec";
  expect_frames(make_clip("clip.webm", "libvpx-vp9"), 8);
}
TEST(VideoDecode, MkvFfv1Lossless) {
  if (!has_video_encoder("ffv1")) GTEST_SKIP() << "no ffv1 encoder in this libavcodec";
  // ffv1 keeps yuv420p exactly, so only the RGB <-> YUV rounding remains.
  expect_frames(make_clip("clip.mkv", "ffv1"), 3);
}
TEST(VideoDecode, Mp4Mpeg4WithBFrames) {
  if (!has_video_encoder("mpeg4")) GTEST_SKIP() << "no mpeg4 encoder in this libavcodec";
  // Frame indices count frames in presentation order, not packets in file order.
  expect_frames(make_clip("bframes.mp4", "mpeg4"), 12);
}
TEST(VideoDecode, AnimatedGif) {
  if (!has_video_encoder("gif")) GTEST_SKIP() << "no gif encoder in this libavcodec";
  // rgb8 (3-3-2 bits): up to half a quantisation step of 255/3 in blue.
  expect_frames(make_clip("clip.gif", "gif"), 43);
}

TEST(VideoDecode, FromBytesAndAllFrames) {
  if (!has_video_encoder("libx264")) GTEST_SKIP() << "no libx264 encoder";
  const std::string path = make_clip("bytes.mp4", "libx264");
  std::ifstream f(path, std::ios::binary);
  const std::vector<uint8_t> bytes((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  const VideoSource v = VideoSource::open_bytes(bytes.data(), bytes.size(), "request video 1");
  EXPECT_EQ(v.info().frames, kFrames);
  Idx all;
  for (int64_t i = 0; i < kFrames; ++i) all.push_back(i);
  int64_t n = 0;
  v.decode_frames(all, [&](int64_t i, RgbImage&& fr) {
    EXPECT_EQ(i, n++);
    double got[3];
    id_color(fr, got);
    uint8_t want[3];
    test_clip_color(i, want);
    EXPECT_NEAR(got[0], want[0], 6) << i;
  });
  EXPECT_EQ(n, kFrames);
  // Asking for a frame past the end names the file and what happened.
  EXPECT_NE(message_of([&] { v.decode_frames({3, 40}, [](int64_t, RgbImage&&) {}); }).find("request video 1: the video ended"),
            std::string::npos);
}

TEST(VideoDecode, ClearErrors) {
  const std::string missing = scratch("missing.mp4");
  EXPECT_NE(message_of([&] { VideoSource::open_file(missing); }).find(missing + ": no such file"), std::string::npos);

  const std::string junk = scratch("junk.mp4");
  std::ofstream(junk, std::ios::binary) << std::string(4096, 'x');
  EXPECT_NE(message_of([&] { VideoSource::open_file(junk); }).find(junk + ": not a readable video"), std::string::npos);
  const uint8_t z[16] = {};
  EXPECT_NE(message_of([&] { VideoSource::open_bytes(z, sizeof(z), "req"); }).find("req: not a readable video"),
            std::string::npos);

  // A WAV file: a real container without a video stream.
  const std::string wav = scratch("tone.wav");
  {
    std::ofstream w(wav, std::ios::binary);
    auto u32 = [&](uint32_t v) { w.write(reinterpret_cast<const char*>(&v), 4); };
    auto u16 = [&](uint16_t v) { w.write(reinterpret_cast<const char*>(&v), 2); };
    const uint32_t samples = 8000;
    w << "RIFF";
    u32(36 + samples * 2);
    w << "WAVEfmt ";
    u32(16), u16(1), u16(1), u32(8000), u32(16000), u16(2), u16(16);
    w << "data";
    u32(samples * 2);
    for (uint32_t i = 0; i < samples; ++i) u16(uint16_t((i * 37) & 0xffff));
  }
  EXPECT_NE(message_of([&] { VideoSource::open_file(wav); }).find("has no video stream"), std::string::npos);

  if (!has_video_encoder("libx264")) return;
  const std::string mp4 = make_clip("limits.mp4", "libx264");
  VideoLimits lim;
  lim.max_frame_pixels = 1000;
  EXPECT_NE(message_of([&] { VideoSource::open_file(mp4, lim); }).find("more than the limit of 1000"), std::string::npos);
  lim = VideoLimits{};
  lim.max_frames = 10;
  EXPECT_NE(message_of([&] { VideoSource::open_file(mp4, lim); }).find("more than 10 frames"), std::string::npos);
  lim = VideoLimits{};
  lim.max_duration_s = 2;
  EXPECT_NE(message_of([&] { VideoSource::open_file(mp4, lim); }).find("more than 21 frames"), std::string::npos);

  // Truncated: half the bytes of an MP4 (index at the end) and of a WebM (index-free clusters).
  for (const char* enc : {"libx264", "libvpx-vp9"}) {
    if (!has_video_encoder(enc)) continue;
    const std::string full = make_clip(std::string("trunc_src.") + (enc[3] == 'x' ? "mp4" : "webm"), enc);
    const std::string cut = scratch(std::string("trunc.") + (enc[3] == 'x' ? "mp4" : "webm"));
    const auto size = std::filesystem::file_size(full);
    std::filesystem::copy_file(full, cut, std::filesystem::copy_options::overwrite_existing);
    std::filesystem::resize_file(cut, size / 2);
    const std::string msg = message_of([&] {
      const VideoSource v = VideoSource::open_file(cut);
      preprocess_video(v);
    });
    EXPECT_NE(msg.find(cut + ": "), std::string::npos) << msg;
    EXPECT_NE(msg.find("truncated"), std::string::npos) << msg;
  }
}

// The long-video and short-clip branches of the sampler, end to end through the decoder.
TEST(VideoDecode, LongAndShortClips) {
  if (!has_video_encoder("libx264")) GTEST_SKIP() << "no libx264 encoder";
  // 310 s at 1 fps: longer than max_duration 300, so 300 instants over the whole video.
  const std::string long_clip = scratch("long.mp4");
  encode_video_file(long_clip, "libx264", 32, 32, 1, 1, 310, [](int64_t i) { return test_clip_frame(i, 32, 32); });
  const VideoSource lv = VideoSource::open_file(long_clip);
  EXPECT_EQ(lv.info().frames, 310);
  const VideoInput li = preprocess_video(lv);
  EXPECT_EQ(li.indices, sample_frame_indices(310, 1.0, {}));
  // The last instant, t = 310 s, clamps to frame 309, which t = 308.96 s already took: 299 frames.
  EXPECT_EQ(li.indices.size(), 299u);
  EXPECT_EQ(li.indices.back(), 309);
  EXPECT_EQ(li.pixels.grid.t, 150);
  EXPECT_EQ(li.size.width, 56);  // 32x32 is below min_pixels: scaled up to 56x56
  // 1 s at 10 fps: one step sample, so min_frames spreads 4 frames.
  const std::string short_clip = scratch("short.mp4");
  encode_video_file(short_clip, "libx264", kW, kH, 10, 1, 10, [](int64_t i) { return test_clip_frame(i, kW, kH); });
  std::vector<int64_t> seen;
  const VideoInput si = preprocess_video(VideoSource::open_file(short_clip), PreprocessConfig::video_frames(), {},
                                         [&](int64_t i, const RgbImage&) { seen.push_back(i); });
  EXPECT_EQ(seen, (Idx{0, 2, 5, 7}));
  EXPECT_EQ(si.timestamps, (std::vector<double>{0.0, 0.5}));
}

// The server's entry: parts in prompt order with media as bytes gives exactly what the CLI's
// placeholder form gives from files.
TEST(MultimodalPrompt, PartsWithBytesEqualPlaceholdersWithFiles) {
  if (!has_video_encoder("libx264")) GTEST_SKIP() << "no libx264 encoder";
  const std::string dir = scratch("tiny_vl");
  RandomCheckpointOptions o;
  o.preset = "tiny-vl";
  o.seed = 3;
  o.out_dir = dir;
  make_random_checkpoint(o);
  auto engine = Engine::load(dir, 1);
  const std::string clip = make_clip("parts.mp4", "libx264");
  const std::string gif = make_clip("parts.gif", "gif");  // a GIF file read as an image: its first frame
  auto read = [](const std::string& p) {
    std::ifstream f(p, std::ios::binary);
    return std::vector<uint8_t>((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  };
  const std::vector<uint8_t> vb = read(clip), ib = read(gif);
  const MultimodalPrompt a =
      build_multimodal_prompt(*engine, "See ]<]video[>[ and ]<]image[>[.", {gif}, {clip}, MultimodalOptions{});
  MediaInput v{MediaKind::Video, "", vb.data(), vb.size(), "request video 1"};
  MediaInput i{MediaKind::Image, "", ib.data(), ib.size(), "request image 1"};
  const MultimodalPrompt b = build_multimodal_prompt(
      *engine, std::vector<PromptPart>{{"See ", std::nullopt}, {"", v}, {" and ", std::nullopt}, {"", i}, {".", std::nullopt}});
  EXPECT_EQ(a.prompt.ids(), b.prompt.ids());
  EXPECT_EQ(a.prompt.keys(), b.prompt.keys());
  EXPECT_EQ(a.prompt.input_rows(engine->model()), b.prompt.input_rows(engine->model()));
  ASSERT_EQ(b.items.size(), 2u);
  EXPECT_EQ(b.items[0]->layout.kind, MediaKind::Video);
  EXPECT_EQ(b.items[1]->layout.kind, MediaKind::Image);
}

// Mutated files (random bytes overwritten, or cut anywhere) either decode or throw m3::Error naming
// the file; never crash (ASan runs this too).
TEST(VideoDecode, MutatedFilesFailCleanly) {
  std::mt19937 rng(17);
  int decoded = 0, refused = 0;
  for (const char* enc : {"libx264", "libvpx-vp9", "gif"}) {
    if (!has_video_encoder(enc)) continue;
    const std::string ext = enc[3] == 'x' ? "mp4" : enc[3] == 'v' ? "webm" : "gif";
    const std::string src = make_clip("mut_src." + ext, enc);
    std::ifstream f(src, std::ios::binary);
    const std::vector<uint8_t> bytes((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
    for (int trial = 0; trial < 24; ++trial) {
      std::vector<uint8_t> m = bytes;
      if (trial % 3 == 2) {
        m.resize(size_t(rng() % m.size()) + 1);
      } else {
        for (int k = 0; k < 1 + trial % 8; ++k) m[rng() % m.size()] = uint8_t(rng());
      }
      const std::string name = ext + " mutation " + std::to_string(trial);
      try {
        const VideoSource v = VideoSource::open_bytes(m.data(), m.size(), name);
        preprocess_video(v);
        ++decoded;
      } catch (const Error& e) {
        EXPECT_EQ(std::string(e.what()).rfind(name + ": ", 0), 0u) << e.what();
        ++refused;
      }
    }
  }
  EXPECT_GT(decoded + refused, 0);
}

}  // namespace
}  // namespace m3::vision
