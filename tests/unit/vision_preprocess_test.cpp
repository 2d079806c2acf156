// Image preprocessing (spec §5.1): smart_resize, Pillow-exact bicubic resize, normalisation,
// patch layout, and decoding with its error paths. Golden values were produced with Pillow 9.4
// (Image.resize(..., Image.BICUBIC)) and NumPy float32; the integration test
// tests/integration/test_vision_preprocess.py compares whole images against Pillow.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>

#include "m3/error.h"
#include "vision/image_decode.h"
#include "vision/png_chunks.h"
#include "vision/preprocess.h"
#include "vision/resize.h"

#define STB_IMAGE_WRITE_IMPLEMENTATION
#define STB_IMAGE_WRITE_STATIC
#if defined(__GNUC__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wunused-function"
#pragma GCC diagnostic ignored "-Wmissing-field-initializers"
#endif
#include <stb/stb_image_write.h>
#if defined(__GNUC__)
#pragma GCC diagnostic pop
#endif

using namespace m3;
using namespace m3::vision;

namespace {

// The 7x5 test pattern the Pillow goldens were made from.
RgbImage pattern_7x5() {
  RgbImage img(7, 5);
  for (int y = 0; y < 5; ++y)
    for (int x = 0; x < 7; ++x)
      for (int c = 0; c < 3; ++c) img.row(y)[x * 3 + c] = uint8_t((x * 37 + y * 91 + c * 53 + x * y * 7) % 256);
  return img;
}

RgbImage random_image(int w, int h, uint32_t seed) {
  std::mt19937 rng(seed);
  RgbImage img(w, h);
  for (uint8_t& v : img.pixels) v = uint8_t(rng() & 255);
  return img;
}

// Encoded image bytes from stb_image_write.
std::vector<uint8_t> encode(const char* format, int w, int h, int channels, const std::vector<uint8_t>& px) {
  std::vector<uint8_t> out;
  auto sink = [](void* ctx, void* data, int size) {
    auto* v = static_cast<std::vector<uint8_t>*>(ctx);
    v->insert(v->end(), static_cast<uint8_t*>(data), static_cast<uint8_t*>(data) + size);
  };
  if (!std::strcmp(format, "png")) stbi_write_png_to_func(sink, &out, w, h, channels, px.data(), w * channels);
  if (!std::strcmp(format, "bmp")) stbi_write_bmp_to_func(sink, &out, w, h, channels, px.data());
  if (!std::strcmp(format, "jpg")) stbi_write_jpg_to_func(sink, &out, w, h, channels, px.data(), 95);
  return out;
}

// Runs `fn`, expects an m3::Error whose message contains every one of `parts`.
template <typename Fn>
void expect_error(Fn fn, std::initializer_list<const char*> parts) {
  try {
    fn();
    ADD_FAILURE() << "expected an error mentioning " << *parts.begin();
  } catch (const Error& e) {
    for (const char* p : parts) EXPECT_NE(std::string(e.what()).find(p), std::string::npos) << e.what();
  }
}

}  // namespace

// ---- smart_resize ------------------------------------------------------------------------------

TEST(VisionSmartResize, MatchesTheReferenceFormula) {
  // {H, W, H', W'} from the Python reference (vLLM smart_resize, Python's banker's round).
  const int cases[][4] = {
      {28, 28, 56, 56},      {37, 100, 28, 112},  {480, 640, 476, 644},  {1080, 1920, 504, 896},
      {3000, 4000, 560, 756}, {4000, 20, 4004, 28}, {600, 3, 588, 28},     {70, 70, 56, 56},
      {98, 98, 112, 112},    {700, 42, 700, 56},  {1, 1, 56, 56},        {10, 10, 56, 56},
      {672, 672, 672, 672},  {673, 673, 672, 672}, {645, 700, 644, 700},
  };
  for (const auto& c : cases) {
    const ResizedSize r = smart_resize(c[0], c[1], PreprocessConfig{});
    EXPECT_EQ(r.height, c[2]) << c[1] << "x" << c[0];
    EXPECT_EQ(r.width, c[3]) << c[1] << "x" << c[0];
  }
}

TEST(VisionSmartResize, RoundsHalfToEvenLikePython) {
  PreprocessConfig cfg;
  cfg.min_pixels = 1;  // keep the rounding branch
  // 70/28 = 2.5 -> 2 (half-up would give 3); 98/28 = 3.5 -> 4; 42/28 = 1.5 -> 2.
  EXPECT_EQ(smart_resize(70, 280, cfg).height, 56);
  EXPECT_EQ(smart_resize(98, 280, cfg).height, 112);
  EXPECT_EQ(smart_resize(42, 280, cfg).height, 56);
}

TEST(VisionSmartResize, TokenBudgetHoldsForManyShapes) {
  const PreprocessConfig cfg;
  for (int h = 1; h < 3000; h += 37)
    for (int w = 1; w < 3000; w += 41) {
      if (std::max(h, w) > 200 * std::min(h, w)) continue;
      const ResizedSize r = smart_resize(h, w, cfg);
      ASSERT_EQ(r.height % 28, 0);
      ASSERT_EQ(r.width % 28, 0);
      ASSERT_LE(int64_t(r.height) * r.width, cfg.max_pixels) << w << "x" << h;
      ASSERT_GE(int64_t(r.height) * r.width, cfg.min_pixels) << w << "x" << h;
    }
}

TEST(VisionSmartResize, RejectsAspectRatioAbove200) {
  EXPECT_NO_THROW(smart_resize(1, 200, PreprocessConfig{}));
  EXPECT_NO_THROW(smart_resize(3, 600, PreprocessConfig{}));
  expect_error([] { smart_resize(1, 201, PreprocessConfig{}); }, {"201x1", "aspect ratio", "200"});
  expect_error([] { smart_resize(4001, 20, PreprocessConfig{}); }, {"aspect ratio"});
  expect_error([] { smart_resize(0, 20, PreprocessConfig{}); }, {"empty"});
}

TEST(VisionSmartResize, LongSideMode) {
  // {H, W, max_long_side, H', W'} from the reference _smart_resize_by_long_side.
  const int cases[][5] = {
      {3000, 4000, 1008, 756, 1008}, {37, 100, 1008, 112, 308},   {480, 640, 1008, 476, 644},
      {5000, 50, 2000, 1988, 28},    {3000, 3000, 4000, 2996, 2996}, {3584, 3583, 3584, 3584, 3584},
  };
  for (const auto& c : cases) {
    PreprocessConfig cfg;
    cfg.max_long_side_pixel = c[2];
    const ResizedSize r = smart_resize(c[0], c[1], cfg);
    EXPECT_EQ(r.height, c[3]) << c[1] << "x" << c[0];
    EXPECT_EQ(r.width, c[4]) << c[1] << "x" << c[0];
  }
  // 3600 rounds up to 3612; 3612^2 exceeds the 3584^2 area cap.
  PreprocessConfig cfg;
  cfg.max_long_side_pixel = 4000;
  expect_error([&] { smart_resize(3600, 3600, cfg); }, {"3612x3612", "max_total_pixels"});
  cfg.max_total_pixels.reset();  // video frames: the cap is checked elsewhere
  EXPECT_EQ(smart_resize(3600, 3600, cfg).height, 3612);
}

// ---- resize ------------------------------------------------------------------------------------

TEST(VisionResize, MatchesPillowGoldens) {
  struct Golden {
    int w, h;
    std::vector<int> px;
  };
  // Pillow 9.4: Image.fromarray(pattern_7x5).resize((w, h), Image.BICUBIC)
  const Golden goldens[] = {
      {3, 2, {102, 130, 141, 122, 132, 148, 136, 133, 127, 126, 137, 126, 140, 138, 136, 154, 132, 124}},
      {7, 3, {40,  93,  146, 80,  133, 186, 119, 172, 111, 159, 97,  158, 84,  145, 198, 131, 184, 87,  171, 74,  127,
              128, 181, 86,  179, 84,  146, 82,  144, 134, 142, 132, 122, 130, 120, 173, 118, 171, 94,  169, 92,  145,
              68,  121, 174, 130, 183, 87,  193, 96,  157, 106, 167, 105, 176, 115, 168, 125, 178, 81,  187, 90,  143}},
      {4, 5, {15,  68,  121, 77,  130, 189, 145, 208, 208, 207, 119, 55,  109, 171, 217, 193, 165, 76,  78,  50,
              108, 72,  134, 187, 205, 141, 52,  75,  76,  144, 120, 188, 189, 212, 123, 59,  40,  93,  156, 144,
              201, 173, 201, 112, 84,  83,  129, 192, 144, 190, 125, 173, 83,  90,  96,  163, 170, 216, 128, 63}},
      {1, 1, {130, 133, 135}},
      {16, 2, {76,  133, 118, 83,  129, 130, 105, 117, 157, 122, 114, 174, 113, 139, 146, 103, 164, 113, 120, 147,
               116, 149, 110, 136, 146, 102, 158, 110, 120, 183, 90,  141, 185, 103, 168, 136, 125, 180, 91,  147,
               141, 101, 165, 91,  128, 174, 71,  137, 85,  144, 138, 97,  144, 132, 126, 144, 114, 151, 141, 106,
               154, 124, 130, 149, 112, 156, 136, 127, 144, 119, 157, 115, 125, 157, 118, 156, 128, 155, 168, 118,
               166, 143, 150, 124, 122, 175, 86,  143, 145, 104, 174, 101, 137, 187, 84,  150}},
  };
  const RgbImage src = pattern_7x5();
  for (const Golden& g : goldens) {
    const RgbImage out = resize_bicubic(src, g.w, g.h);
    ASSERT_EQ(out.pixels.size(), g.px.size());
    for (size_t i = 0; i < g.px.size(); ++i) ASSERT_EQ(int(out.pixels[i]), g.px[i]) << g.w << "x" << g.h << " at " << i;
  }
}

TEST(VisionResize, Upscale11x9MatchesPillowSpotChecks) {
  // A few values of the 11x9 upscale (overshoot clipped to 0 and 255 included).
  const RgbImage out = resize_bicubic(pattern_7x5(), 11, 9);
  EXPECT_EQ(out.row(0)[0], 0);
  EXPECT_EQ(out.row(0)[20], 255);
  EXPECT_EQ(out.row(0)[31], 0);
  EXPECT_EQ(out.row(8)[32], 87);
}

TEST(VisionResize, IdentityAndConstantImages) {
  const RgbImage src = random_image(13, 9, 1);
  EXPECT_EQ(resize_bicubic(src, 13, 9).pixels, src.pixels);
  RgbImage flat(31, 17);
  std::fill(flat.pixels.begin(), flat.pixels.end(), uint8_t(200));
  for (auto [w, h] : {std::pair{5, 3}, {64, 40}, {31, 5}, {7, 17}}) {
    const RgbImage out = resize_bicubic(flat, w, h);
    for (uint8_t v : out.pixels) ASSERT_EQ(v, 200);  // weights sum to one after fixed-point rounding
  }
}

TEST(VisionResize, AgreesWithFloatReferenceWithinRounding) {
  for (auto [w, h, ow, oh] : {std::array{37, 23, 11, 50}, {100, 7, 33, 7}, {9, 64, 9, 20}, {50, 50, 168, 112}}) {
    const RgbImage src = random_image(w, h, uint32_t(w * 131 + h));
    const RgbImage out = resize_bicubic(src, ow, oh);
    const std::vector<double> ref = resize_bicubic_reference(src, ow, oh);
    double worst = 0;
    for (size_t i = 0; i < ref.size(); ++i) worst = std::max(worst, std::abs(out.pixels[i] - ref[i]));
    // One rounding of the 8-bit intermediate (amplified by the vertical kernel's ~1.3 L1 norm)
    // plus the final rounding.
    EXPECT_LE(worst, 1.5) << w << "x" << h << " -> " << ow << "x" << oh;
  }
}

// ---- normalisation and patch layout -------------------------------------------------------------

TEST(VisionNormalize, MatchesFloat32FusedFormulaBitForBit) {
  // NumPy: (float32(v) - float32(mean)*255) / (float32(std)*255), the vLLM processor's arithmetic.
  const PreprocessConfig cfg;
  const struct {
    int v, c;
    uint32_t bits;
  } cases[] = {{0, 0, 3219482844u}, {255, 0, 1073157442u}, {128, 1, 1043133280u}, {77, 2, 3200598714u},
               {255, 2, 1074353761u}};
  for (const auto& k : cases) {
    const float f = normalize_level(k.v, k.c, cfg);
    uint32_t bits;
    std::memcpy(&bits, &f, 4);
    EXPECT_EQ(bits, k.bits) << "level " << k.v << " channel " << k.c;
    const double exact = (k.v / 255.0 - cfg.mean[k.c]) / cfg.std[k.c];
    EXPECT_NEAR(f, exact, 1e-6);
  }
}

TEST(VisionPatchify, TokenOrderAndInnerLayout) {
  const PreprocessConfig cfg;
  // 56x84 image: grid 4x6 patches, 2x3 merge windows. Pixel (y, x, c) gets a level that encodes it.
  RgbImage img(84, 56);
  auto level = [](int y, int x, int c) { return uint8_t((y * 7 + x * 3 + c * 101) % 256); };
  for (int y = 0; y < 56; ++y)
    for (int x = 0; x < 84; ++x)
      for (int c = 0; c < 3; ++c) img.row(y)[x * 3 + c] = level(y, x, c);
  const PixelValues pv = patchify({img}, cfg);
  EXPECT_EQ(pv.grid.t, 1);
  EXPECT_EQ(pv.grid.h, 4);
  EXPECT_EQ(pv.grid.w, 6);
  EXPECT_EQ(pv.rows, 24);
  EXPECT_EQ(pv.cols, 1176);
  EXPECT_EQ(pv.merged_tokens(), 6);
  for (int64_t r = 0; r < pv.rows; ++r) {
    // row = ((bh * 3 + bw) * 2 + sh) * 2 + sw
    const int sw = int(r % 2), sh = int(r / 2 % 2), bw = int(r / 4 % 3), bh = int(r / 12);
    for (int col = 0; col < 1176; ++col) {
      // col = ((c * 2 + tp) * 14 + ph) * 14 + pw; both temporal slices are the same image
      const int pw = col % 14, ph = col / 14 % 14, c = col / 392;
      const int y = (bh * 2 + sh) * 14 + ph, x = (bw * 2 + sw) * 14 + pw;
      ASSERT_EQ(pv.data[size_t(r * 1176 + col)], normalize_level(level(y, x, c), c, cfg)) << r << "," << col;
    }
  }
}

TEST(VisionPatchify, PadsFramesToAMultipleOfTwoWithTheLast) {
  const PreprocessConfig cfg;
  std::vector<RgbImage> frames;
  for (int i = 0; i < 3; ++i) {
    RgbImage f(28, 28);
    std::fill(f.pixels.begin(), f.pixels.end(), uint8_t(10 * (i + 1)));
    frames.push_back(f);
  }
  const PixelValues pv = patchify(frames, cfg);
  EXPECT_EQ(pv.grid.t, 2);
  EXPECT_EQ(pv.rows, 2 * 2 * 2);
  // Second temporal group, channel 0: tp=0 is frame 2 (level 30), tp=1 the repeated frame 2.
  const float* row = &pv.data[size_t(4 * 1176)];
  EXPECT_EQ(row[0], normalize_level(30, 0, cfg));
  EXPECT_EQ(row[196], normalize_level(30, 0, cfg));
  // First group: frame 0 then frame 1.
  EXPECT_EQ(pv.data[0], normalize_level(10, 0, cfg));
  EXPECT_EQ(pv.data[196], normalize_level(20, 0, cfg));
  frames[1] = RgbImage(56, 28);
  expect_error([&] { patchify(frames, cfg); }, {"differ in size"});
  expect_error([&] { patchify({RgbImage(30, 28)}, cfg); }, {"multiple of 28"});
}

TEST(VisionPreprocess, GridAndTokenCount) {
  const PixelValues pv = preprocess_image(random_image(640, 480, 3));
  EXPECT_EQ(pv.grid.t, 1);
  EXPECT_EQ(pv.grid.h, 34);  // 476 / 14
  EXPECT_EQ(pv.grid.w, 46);  // 644 / 14
  EXPECT_EQ(pv.merged_tokens(), 17 * 23);
  EXPECT_EQ(pv.data.size(), size_t(34 * 46 * 1176));
}

// ---- decoding ------------------------------------------------------------------------------------

TEST(VisionDecode, PngRoundTripsAllChannelCounts) {
  const RgbImage src = random_image(13, 7, 9);
  EXPECT_EQ(decode_image(encode("png", 13, 7, 3, src.pixels).data(), encode("png", 13, 7, 3, src.pixels).size(), "rgb.png").pixels,
            src.pixels);
  // Gray is replicated; gray+alpha and RGBA are blended onto white with Pillow's rounding.
  std::vector<uint8_t> ga = {0, 255, 200, 0, 100, 128, 255, 77};
  std::vector<uint8_t> bytes = encode("png", 4, 1, 2, ga);
  RgbImage out = decode_image(bytes.data(), bytes.size(), "ga.png");
  const uint8_t want_ga[] = {0, 0, 0, 255, 255, 255, 177, 177, 177, 255, 255, 255};
  EXPECT_EQ(0, std::memcmp(out.pixels.data(), want_ga, 12));
  std::vector<uint8_t> rgba = {10, 20, 30, 255, 10, 20, 30, 0, 10, 20, 250, 128};
  bytes = encode("png", 3, 1, 4, rgba);
  out = decode_image(bytes.data(), bytes.size(), "rgba.png");
  const uint8_t want_rgba[] = {10, 20, 30, 255, 255, 255, 132, 137, 252};
  EXPECT_EQ(0, std::memcmp(out.pixels.data(), want_rgba, 9));
  DecodeOptions black;
  black.background[0] = black.background[1] = black.background[2] = 0;
  out = decode_image(bytes.data(), bytes.size(), "rgba.png", black);
  EXPECT_EQ(out.pixels[3], 0);
}

TEST(VisionDecode, BmpAndJpeg) {
  const RgbImage src = random_image(9, 5, 4);
  std::vector<uint8_t> bytes = encode("bmp", 9, 5, 3, src.pixels);
  EXPECT_EQ(decode_image(bytes.data(), bytes.size(), "x.bmp").pixels, src.pixels);
  RgbImage flat(16, 16);
  std::fill(flat.pixels.begin(), flat.pixels.end(), uint8_t(120));
  bytes = encode("jpg", 16, 16, 3, flat.pixels);
  const RgbImage out = decode_image(bytes.data(), bytes.size(), "x.jpg");
  ASSERT_EQ(out.width, 16);
  for (uint8_t v : out.pixels) EXPECT_NEAR(v, 120, 2);  // lossy, but a flat image stays flat
}

TEST(VisionDecode, ExifOrientationTransforms) {
  RgbImage img(3, 2);  // pixel value = 10*y + x, in all channels
  for (int y = 0; y < 2; ++y)
    for (int x = 0; x < 3; ++x) std::memset(img.row(y) + x * 3, 10 * y + x, 3);
  auto grid = [](const RgbImage& im) {
    std::vector<int> v;
    for (int y = 0; y < im.height; ++y)
      for (int x = 0; x < im.width; ++x) v.push_back(im.row(y)[x * 3]);
    return v;
  };
  // Pillow: Image.transpose(FLIP_LEFT_RIGHT, ROTATE_180, FLIP_TOP_BOTTOM, TRANSPOSE, ROTATE_270, TRANSVERSE, ROTATE_90)
  EXPECT_EQ(grid(apply_orientation(img, 1)), (std::vector<int>{0, 1, 2, 10, 11, 12}));
  EXPECT_EQ(grid(apply_orientation(img, 2)), (std::vector<int>{2, 1, 0, 12, 11, 10}));
  EXPECT_EQ(grid(apply_orientation(img, 3)), (std::vector<int>{12, 11, 10, 2, 1, 0}));
  EXPECT_EQ(grid(apply_orientation(img, 4)), (std::vector<int>{10, 11, 12, 0, 1, 2}));
  EXPECT_EQ(grid(apply_orientation(img, 5)), (std::vector<int>{0, 10, 1, 11, 2, 12}));
  EXPECT_EQ(grid(apply_orientation(img, 6)), (std::vector<int>{10, 0, 11, 1, 12, 2}));
  EXPECT_EQ(grid(apply_orientation(img, 7)), (std::vector<int>{12, 2, 11, 1, 10, 0}));
  EXPECT_EQ(grid(apply_orientation(img, 8)), (std::vector<int>{2, 12, 1, 11, 0, 10}));
  EXPECT_EQ(apply_orientation(img, 6).width, 2);
}

TEST(VisionDecode, ErrorsNameTheFileAndTheProblem) {
  const RgbImage src = random_image(20, 20, 2);
  const std::vector<uint8_t> png = encode("png", 20, 20, 3, src.pixels);

  const uint8_t junk[] = {'h', 'e', 'l', 'l', 'o'};
  expect_error([&] { decode_image(junk, sizeof junk, "a.txt"); }, {"a.txt", "unsupported image format"});
  expect_error([&] { decode_image(junk, 0, "empty.png"); }, {"empty.png", "empty"});
  const uint8_t tiff[] = {'I', 'I', 42, 0, 8, 0, 0, 0, 0, 0};
  expect_error([&] { decode_image(tiff, sizeof tiff, "x.tif"); }, {"x.tif", "unsupported"});

  // Truncated: half the PNG (the IDAT stream is cut).
  expect_error([&] { decode_image(png.data(), png.size() / 2, "half.png"); }, {"half.png", "corrupt PNG"});
  // Corrupt: valid header, garbage after it.
  std::vector<uint8_t> bad = png;
  for (size_t i = 40; i < bad.size(); ++i) bad[i] = uint8_t(i * 7);
  expect_error([&] { decode_image(bad.data(), bad.size(), "bad.png"); }, {"bad.png", "corrupt"});

  // Zero size: IHDR width set to 0.
  std::vector<uint8_t> zero = png;
  std::memset(zero.data() + 16, 0, 4);
  expect_error([&] { decode_image(zero.data(), zero.size(), "zero.png"); }, {"zero.png", "zero-size"});

  // Too large: refused from the header (100000 x 100000), before any allocation.
  std::vector<uint8_t> huge = png;
  const uint8_t big[4] = {0x00, 0x01, 0x86, 0xA0};
  std::memcpy(huge.data() + 16, big, 4);
  std::memcpy(huge.data() + 20, big, 4);
  expect_error([&] { decode_image(huge.data(), huge.size(), "huge.png"); }, {"huge.png", "100000x100000", "limit"});
  DecodeOptions small;
  small.max_pixels = 399;
  expect_error([&] { decode_image(png.data(), png.size(), "p.png", small); }, {"p.png", "20x20", "limit of 399"});

  // Truncated JPEG: both decoders refuse it (Pillow does too).
  const std::vector<uint8_t> jpg = encode("jpg", 20, 20, 3, src.pixels);
  expect_error([&] { decode_image(jpg.data(), jpg.size() * 2 / 3, "cut.jpg"); }, {"cut.jpg", "truncated"});

  expect_error([] { decode_image_file("/nonexistent/dir/x.png"); }, {"/nonexistent/dir/x.png", "cannot open"});
}

// ---- hostile headers: sizes the file cannot back, overflowing values, wrong CRCs ---------------

void put_be32(std::vector<uint8_t>& v, size_t at, uint32_t x) {
  for (int i = 0; i < 4; ++i) v[at + size_t(i)] = uint8_t(x >> (24 - 8 * i));
}
void put_le(std::vector<uint8_t>& v, size_t at, uint32_t x, int bytes) {
  for (int i = 0; i < bytes; ++i) v[at + size_t(i)] = uint8_t(x >> (8 * i));
}
// A PNG whose IHDR says w x h, with the IHDR CRC recomputed so that only the size lies.
std::vector<uint8_t> png_claiming(uint32_t w, uint32_t h) {
  const RgbImage src = random_image(16, 16, 3);
  std::vector<uint8_t> png = encode("png", 16, 16, 3, src.pixels);
  put_be32(png, 16, w);
  put_be32(png, 20, h);
  put_be32(png, 29, crc32_update(0, png.data() + 12, 17));
  return png;
}

TEST(VisionDecode, Crc32KnownValue) {
  const char* text = "123456789";
  EXPECT_EQ(crc32_update(0, reinterpret_cast<const uint8_t*>(text), 9), 0xCBF43926u);
  // Continuing a CRC over a split buffer equals one pass.
  EXPECT_EQ(crc32_update(crc32_update(0, reinterpret_cast<const uint8_t*>(text), 4), reinterpret_cast<const uint8_t*>(text) + 4, 5),
            0xCBF43926u);
}

TEST(VisionDecode, HeaderValuesNeverOverflow) {
  // 4294967295 x 4294967295: the pixel count overflowed int64 (a UBSan report) before.
  const std::vector<uint8_t> png = png_claiming(0xFFFFFFFFu, 0xFFFFFFFFu);
  expect_error([&] { decode_image(png.data(), png.size(), "max.png"); }, {"max.png", "4294967295x4294967295", "limit"});
  const std::vector<uint8_t> tall = png_claiming(1, 0xFFFFFFFFu);
  expect_error([&] { decode_image(tall.data(), tall.size(), "tall.png"); }, {"tall.png", "limit"});
}

TEST(VisionDecode, PngWithAWrongCrcIsRefused) {
  const RgbImage src = random_image(8, 8, 1);
  std::vector<uint8_t> png = encode("png", 8, 8, 3, src.pixels);
  ASSERT_NO_THROW(decode_image(png.data(), png.size(), "ok.png"));
  png[29] ^= 1;  // the IHDR chunk's CRC (Pillow refuses this file)
  expect_error([&] { decode_image(png.data(), png.size(), "crc.png"); }, {"crc.png", "wrong CRC", "IHDR"});
  std::vector<uint8_t> data_crc = encode("png", 8, 8, 3, src.pixels);
  data_crc[data_crc.size() - 13] ^= 0x40;  // the last IDAT chunk's CRC, just before IEND
  expect_error([&] { decode_image(data_crc.data(), data_crc.size(), "idat.png"); }, {"idat.png", "wrong CRC", "IDAT"});
}

TEST(VisionDecode, SizesTheFileCannotHoldAreRefusedBeforeDecoding) {
  // Each claims 9000 x 9000 (81 megapixels, under the pixel limit) around a few bytes of data;
  // they were decoded as 81-megapixel images (17 s each) before.
  const std::vector<uint8_t> png = png_claiming(9000, 9000);
  expect_error([&] { decode_image(png.data(), png.size(), "bomb.png"); }, {"bomb.png", "9000x9000", "can hold at most"});

  std::vector<uint8_t> bmp(342, 0);  // 14-byte file header, 40-byte BITMAPINFOHEADER, 288 bytes of pixels
  bmp[0] = 'B', bmp[1] = 'M';
  put_le(bmp, 2, 342, 4);
  put_le(bmp, 10, 54, 4);
  put_le(bmp, 14, 40, 4);
  put_le(bmp, 18, 9000, 4);
  put_le(bmp, 22, 9000, 4);
  put_le(bmp, 26, 1, 2);
  put_le(bmp, 28, 24, 2);
  expect_error([&] { decode_image(bmp.data(), bmp.size(), "bomb.bmp"); }, {"bomb.bmp", "9000x9000", "can hold at most"});

  RgbImage flat(16, 16);
  std::fill(flat.pixels.begin(), flat.pixels.end(), uint8_t(90));
  std::vector<uint8_t> jpg = encode("jpg", 16, 16, 3, flat.pixels);
  size_t sof = 2;
  while (sof + 4 < jpg.size() && !(jpg[sof] == 0xFF && jpg[sof + 1] == 0xC0)) sof += 2 + (size_t(jpg[sof + 2]) << 8 | jpg[sof + 3]);
  ASSERT_LT(sof + 9, jpg.size());
  jpg[sof + 5] = 9000 >> 8, jpg[sof + 6] = 9000 & 0xFF, jpg[sof + 7] = 9000 >> 8, jpg[sof + 8] = 9000 & 0xFF;
  expect_error([&] { decode_image(jpg.data(), jpg.size(), "bomb.jpg"); }, {"bomb.jpg", "9000x9000", "can hold at most"});

  // GIF89a, 9000 x 9000 logical screen, one 1x1 frame of LZW data, trailer.
  std::vector<uint8_t> gif = {'G', 'I', 'F', '8', '9', 'a', 0x28, 0x23, 0x28, 0x23, 0x80, 0, 0,
                              0, 0, 0, 255, 255, 255,  // global palette of 2 colours
                              0x2C, 0, 0, 0, 0, 1, 0, 1, 0, 0, 0x02, 0x02, 0x44, 0x01, 0x00, 0x3B};
  expect_error([&] { decode_image(gif.data(), gif.size(), "bomb.gif"); }, {"bomb.gif", "9000x9000", "can hold at most"});
}

// Mutation test: flipped bytes, cut files and overwritten headers must give an image or an
// m3::Error, never a crash (run under ASan/UBSan in CI).
#ifndef M3_MUTATION_TRIALS
#define M3_MUTATION_TRIALS 400
#endif
constexpr int kMutationTrials = M3_MUTATION_TRIALS;

TEST(VisionDecode, SurvivesMutatedFiles) {
  const RgbImage src = random_image(23, 17, 6);
  std::vector<uint8_t> rgba(size_t(23 * 17 * 4));
  for (size_t i = 0; i < rgba.size(); ++i) rgba[i] = uint8_t(i * 13);
  const std::vector<std::vector<uint8_t>> seeds = {encode("png", 23, 17, 3, src.pixels), encode("png", 23, 17, 4, rgba),
                                                   encode("jpg", 23, 17, 3, src.pixels), encode("bmp", 23, 17, 3, src.pixels)};
  std::mt19937 rng(7);
  int decoded = 0, refused = 0;
  for (const auto& seed : seeds) {
    for (int trial = 0; trial < kMutationTrials; ++trial) {
      std::vector<uint8_t> m = seed;
      const int kind = trial % 3;
      if (kind == 0) {  // flip a few bytes anywhere (headers included)
        for (int k = 0; k < 1 + int(rng() % 4); ++k) m[rng() % m.size()] ^= uint8_t(1 + rng() % 255);
      } else if (kind == 1) {  // cut
        m.resize(rng() % m.size());
      } else {  // overwrite a run in the first 64 bytes with random values
        const size_t at = rng() % std::min<size_t>(64, m.size());
        for (size_t i = at; i < std::min(m.size(), at + 4); ++i) m[i] = uint8_t(rng());
      }
      DecodeOptions opt;
      opt.max_pixels = 1 << 20;  // mutated headers may claim huge sizes
      try {
        const RgbImage img = decode_image(m.data(), m.size(), "mutant", opt);
        ASSERT_EQ(img.pixels.size(), size_t(img.width) * size_t(img.height) * 3);
        ++decoded;
      } catch (const Error&) {
        ++refused;
      }
    }
  }
  EXPECT_GT(decoded, 0);
  EXPECT_GT(refused, 0);
}

TEST(VisionDecode, FromFile) {
  const RgbImage src = random_image(5, 6, 8);
  const std::vector<uint8_t> png = encode("png", 5, 6, 3, src.pixels);
  const std::string path = (std::filesystem::temp_directory_path() / "m3_vision_test.png").string();
  std::ofstream(path, std::ios::binary).write(reinterpret_cast<const char*>(png.data()), std::streamsize(png.size()));
  EXPECT_EQ(decode_image_file(path).pixels, src.pixels);
  std::filesystem::remove(path);
}
