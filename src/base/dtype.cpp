#include "m3/dtype.h"

#include <cmath>

namespace m3 {

size_t dtype_size(DType t) {
  switch (t) {
    case DType::BF16: case DType::F16: return 2;
    case DType::F32: case DType::U32: case DType::I32: return 4;
    case DType::F8_E4M3: case DType::U8: case DType::I8: return 1;
    case DType::I64: return 8;
  }
  return 0;
}

std::string_view dtype_name(DType t) {
  switch (t) {
    case DType::BF16: return "BF16";
    case DType::F16: return "F16";
    case DType::F32: return "F32";
    case DType::F8_E4M3: return "F8_E4M3";
    case DType::U8: return "U8";
    case DType::I8: return "I8";
    case DType::U32: return "U32";
    case DType::I32: return "I32";
    case DType::I64: return "I64";
  }
  return "?";
}

std::optional<DType> parse_dtype(std::string_view s) {
  for (DType t : kAllDTypes)
    if (s == dtype_name(t)) return t;
  return std::nullopt;
}

float f16_to_f32(uint16_t h) {
  const uint32_t sign = (h >> 15) & 1, exp = (h >> 10) & 0x1f, man = h & 0x3ff;
  float v;
  if (exp == 0) v = std::ldexp(float(man), -24);
  else if (exp == 31) v = man ? NAN : INFINITY;
  else v = std::ldexp(float(man | 0x400), int(exp) - 25);
  return sign ? -v : v;
}

uint16_t f32_to_f16(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  const uint32_t sign = (x >> 16) & 0x8000;
  const uint32_t ax = x & 0x7fffffff;
  if (ax > 0x7f800000) return uint16_t(sign | 0x7e00);
  if (ax >= 0x477ff000) return uint16_t(sign | 0x7c00);  // rounds past 65504 -> inf
  if (ax < 0x38800000) {                                  // subnormal or zero in f16
    float a;
    std::memcpy(&a, &ax, 4);
    // scale into units of 2^-24 and round half to even
    float scaled = a * 16777216.0f;
    uint32_t m = uint32_t(std::nearbyint(scaled));
    return uint16_t(sign | m);
  }
  uint32_t e = ((ax >> 23) - 112) << 10;
  uint32_t m = (ax >> 13) & 0x3ff;
  uint32_t rest = ax & 0x1fff;
  uint32_t h = e | m;
  if (rest > 0x1000 || (rest == 0x1000 && (h & 1))) h++;
  return uint16_t(sign | h);
}

float f8e4m3_to_f32(uint8_t v) {
  const uint32_t sign = v >> 7, exp = (v >> 3) & 0xf, man = v & 0x7;
  float r;
  if (exp == 0xf && man == 0x7) return NAN;
  if (exp == 0) r = std::ldexp(float(man), -9);
  else r = std::ldexp(float(man | 0x8), int(exp) - 10);
  return sign ? -r : r;
}

}  // namespace m3
