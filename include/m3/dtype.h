#pragma once
// Element types that appear in safetensors checkpoints, and scalar conversions to/from fp32.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <optional>
#include <string_view>

namespace m3 {

enum class DType { BF16, F16, F32, F8_E4M3, U8, I8, U32, I32, I64 };
// Every DType, in enum order.
inline constexpr DType kAllDTypes[] = {DType::BF16, DType::F16, DType::F32, DType::F8_E4M3, DType::U8,
                                       DType::I8,   DType::U32, DType::I32, DType::I64};

size_t dtype_size(DType t);
// The safetensors spelling: "BF16", "F16", "F32", "F8_E4M3", "U8", "I8", "U32", "I32", "I64".
std::string_view dtype_name(DType t);
std::optional<DType> parse_dtype(std::string_view name);

inline float bf16_to_f32(uint16_t h) {
  uint32_t bits = uint32_t(h) << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

// Round to nearest even, as torch does; NaN stays NaN.
inline uint16_t f32_to_bf16(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, 4);
  if ((bits & 0x7fffffffu) > 0x7f800000u) return uint16_t((bits >> 16) | 0x40);
  bits += 0x7fffu + ((bits >> 16) & 1u);
  return uint16_t(bits >> 16);
}

inline float round_to_bf16(float f) { return bf16_to_f32(f32_to_bf16(f)); }

// The KV cache element types and their --cache-type spellings: "f32", "bf16", "fp8" (F8_E4M3).
std::optional<DType> parse_cache_type(std::string_view name);
const char* cache_type_name(DType t);

float f16_to_f32(uint16_t h);
uint16_t f32_to_f16(float f);
// OCP FP8 E4M3 (float8_e4m3fn): no infinities, 0x7f/0xff are NaN, max 448.
float f8e4m3_to_f32(uint8_t v);
// OCP UE8M0 (the MX scale): 2^(s - 127) exactly (2^-127 is an fp32 subnormal); 255 is NaN.
inline float ue8m0_to_f32(uint8_t s) {
  const uint32_t bits = s == 255 ? 0x7fc00000u : s == 0 ? 0x00400000u : uint32_t(s) << 23;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

}  // namespace m3
