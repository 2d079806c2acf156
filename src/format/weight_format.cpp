#include "format/weight_format.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <mutex>

#include "m3/error.h"
#include "format/linear_weight.h"

namespace m3 {

namespace {

void bf16_row(const LinearWeight& w, int64_t r, float* out) {
  const uint16_t* h = reinterpret_cast<const uint16_t*>(w.row_ptr(r));
  for (int64_t c = 0; c < w.cols; ++c) out[c] = bf16_to_f32(h[c]);
}
void f16_row(const LinearWeight& w, int64_t r, float* out) {
  const uint16_t* h = reinterpret_cast<const uint16_t*>(w.row_ptr(r));
  for (int64_t c = 0; c < w.cols; ++c) out[c] = f16_to_f32(h[c]);
}
void f32_row(const LinearWeight& w, int64_t r, float* out) {
  std::copy_n(reinterpret_cast<const float*>(w.row_ptr(r)), w.cols, out);
}

// Both decodings as tables, built once from the functions above (the same values): a block
// costs one scale lookup and 32 lookups and multiplies, where ldexp per element cost ~100x.
struct Mxfp8Tables {
  float e4m3[256], scale[256];
  Mxfp8Tables() {
    for (int i = 0; i < 256; ++i) {
      e4m3[i] = f8e4m3_to_f32(uint8_t(i));
      scale[i] = ue8m0_to_f32(uint8_t(i));
    }
  }
};
const Mxfp8Tables& mxfp8_tables() {
  static const Mxfp8Tables t;
  return t;
}

void mxfp8_cols(const LinearWeight& w, int64_t r, int64_t c0, int64_t c1, float* out) {
  const Mxfp8Tables& t = mxfp8_tables();
  const uint8_t* q = w.row_ptr(r);
  const uint8_t* scales = w.side_row(0, r);
  for (int64_t b0 = c0; b0 < c1; b0 += 32) {
    const float s = t.scale[scales[b0 / 32]];
    const int64_t b1 = std::min<int64_t>(b0 + 32, c1);
    for (int64_t c = b0; c < b1; ++c) out[c - c0] = t.e4m3[q[c]] * s;
  }
}
void mxfp8_row(const LinearWeight& w, int64_t r, float* out) { mxfp8_cols(w, r, 0, w.cols, out); }

// The affine layout: the values of group g of row r share scales[g] and biases[g] (bf16). The
// product scale x q is exact in fp32 (8 significant bits times at most 8 bits), so the one rounding
// is the sum's, whether or not a kernel fuses it.
template <int Bits>
void affine_cols(const LinearWeight& w, int64_t r, int64_t c0, int64_t c1, float* out) {
  constexpr int kPerWord = 32 / Bits;
  constexpr uint32_t kMask = (1u << Bits) - 1;
  const int64_t group = w.format->block_cols;
  const uint32_t* q = reinterpret_cast<const uint32_t*>(w.row_ptr(r));
  const uint16_t* scales = reinterpret_cast<const uint16_t*>(w.side_row(0, r));
  const uint16_t* biases = reinterpret_cast<const uint16_t*>(w.side_row(1, r));
  for (int64_t g0 = c0 / group * group; g0 < c1; g0 += group) {
    const float s = bf16_to_f32(scales[g0 / group]), b = bf16_to_f32(biases[g0 / group]);
    for (int64_t c = std::max(g0, c0); c < std::min(g0 + group, c1); ++c) {
      const uint32_t v = (q[c / kPerWord] >> (Bits * (c % kPerWord))) & kMask;
      out[c - c0] = s * float(v) + b;
    }
  }
}
template <int Bits>
void affine_row(const LinearWeight& w, int64_t r, float* out) {
  affine_cols<Bits>(w, r, 0, w.cols, out);
}

template <int Bits, int Group>
const WeightFormat& affine() {
  static const std::string name = "affine" + std::to_string(Bits) + "-g" + std::to_string(Group);
  static const WeightFormat f{name,          DType::U32, 32 / Bits, Group, {{"scales", DType::BF16, 1}, {"biases", DType::BF16, 1}},
                              &affine_row<Bits>, &affine_cols<Bits>};
  return f;
}

const std::vector<const WeightFormat*>& affine_formats() {
  static const std::vector<const WeightFormat*> all = {&affine<4, 32>(), &affine<4, 64>(), &affine<4, 128>(),
                                                        &affine<8, 32>(), &affine<8, 64>(), &affine<8, 128>()};
  return all;
}

struct Registry {
  std::mutex mu;
  std::vector<const WeightFormat*> extra;  // registered, in order
};
Registry& registry() {
  static Registry r;
  return r;
}

}  // namespace

const WeightFormat& bf16_format() {
  static const WeightFormat f{"bf16", DType::BF16, 1, 1, {}, &bf16_row};
  return f;
}
const WeightFormat& f16_format() {
  static const WeightFormat f{"f16", DType::F16, 1, 1, {}, &f16_row};
  return f;
}
const WeightFormat& f32_format() {
  static const WeightFormat f{"f32", DType::F32, 1, 1, {}, &f32_row};
  return f;
}

const WeightFormat* dense_format(DType dtype) {
  switch (dtype) {
    case DType::BF16: return &bf16_format();
    case DType::F16: return &f16_format();
    case DType::F32: return &f32_format();
    default: return nullptr;
  }
}

const WeightFormat& mxfp8_format() {
  static const WeightFormat f{"mxfp8", DType::F8_E4M3, 1, 32, {{"weight_scale_inv", DType::U8, 1}}, &mxfp8_row, &mxfp8_cols};
  return f;
}

std::vector<const WeightFormat*> weight_formats() {
  std::vector<const WeightFormat*> all = {&bf16_format(), &f16_format(), &f32_format(), &mxfp8_format()};
  all.insert(all.end(), affine_formats().begin(), affine_formats().end());
  Registry& r = registry();
  std::lock_guard<std::mutex> lk(r.mu);
  all.insert(all.end(), r.extra.begin(), r.extra.end());
  return all;
}

const WeightFormat* find_weight_format(std::string_view name) {
  for (const WeightFormat* f : weight_formats())
    if (f->name == name) return f;
  return nullptr;
}

void register_weight_format(const WeightFormat& format) {
  M3_CHECK(format.dequantize_row != nullptr, "weight format ", format.name, ": no dequantize_row");
  M3_CHECK(format.side.size() <= size_t(LinearWeight::kMaxSide), "weight format ", format.name, ": more than ",
           LinearWeight::kMaxSide, " side tensors");
  M3_CHECK(format.weights_per_element >= 1 && format.block_cols >= 1, "weight format ", format.name,
           ": weights_per_element and block_cols must be >= 1");
  M3_CHECK(find_weight_format(format.name) == nullptr, "weight format ", format.name, " is registered already");
  Registry& r = registry();
  std::lock_guard<std::mutex> lk(r.mu);
  r.extra.push_back(&format);
}

const WeightFormat* affine_format(int bits, int group) {
  for (const WeightFormat* f : affine_formats()) {
    const std::optional<AffineParams> p = affine_params(*f);
    if (p->bits == bits && p->group == group) return f;
  }
  return nullptr;
}

std::optional<AffineParams> affine_params(const WeightFormat& format) {
  for (const WeightFormat* f : affine_formats())
    if (f == &format) return AffineParams{32 / f->weights_per_element, int(f->block_cols)};
  return std::nullopt;
}

const WeightFormat* match_weight_format(DType element, const std::function<bool(const WeightFormat&)>& fits) {
  const WeightFormat* best = nullptr;
  for (const WeightFormat* f : weight_formats()) {
    if (f->element != element || !fits(*f)) continue;
    if (best == nullptr || f->side.size() > best->side.size()) best = f;
  }
  return best;
}

}  // namespace m3
