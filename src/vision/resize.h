#pragma once
// Bicubic resampling that reproduces Pillow's Image.resize(size, Image.BICUBIC) on 8-bit RGB
// byte for byte (Pillow 9.4 libImaging/Resample.c behaviour, verified on random images by
// tests/integration/test_vision_preprocess.py):
//   - separable: a horizontal pass, then a vertical pass; a pass is skipped when that side keeps
//     its size; the horizontal result is rounded and clamped to uint8 before the vertical pass;
//   - kernel: Keys cubic with a = -0.5, support 2, stretched by the downscale factor
//     (scale = in/out, support*max(scale,1)) so downscaling averages (antialiasing);
//   - output pixel i samples around centre (i + 0.5) * scale; taps from
//     floor-ish (int)(centre - support + 0.5) to (int)(centre + support + 0.5), clipped to the image,
//     weights w(k) = K((k - centre + 0.5) / max(scale,1)), normalised to sum 1 in double;
//   - weights become fixed point with 22 fraction bits, rounded half away from zero; the sum
//     starts at 2^21 (round half up) and is shifted right by 22 (floor), then clamped to 0..255.
#include "vision/image_decode.h"

namespace m3::vision {

RgbImage resize_bicubic(const RgbImage& image, int out_width, int out_height);

// The same filter without fixed point or 8-bit intermediate: a float64 reference for tests.
// Agrees with resize_bicubic to within one level per pass.
std::vector<double> resize_bicubic_reference(const RgbImage& image, int out_width, int out_height);

}  // namespace m3::vision
