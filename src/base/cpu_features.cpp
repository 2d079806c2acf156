#include "base/cpu_features.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>

#include <unistd.h>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <cpuid.h>
#endif
#if defined(__aarch64__) && defined(__linux__)
#include <asm/hwcap.h>
#include <sys/auxv.h>
#endif

namespace m3 {

namespace {

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
// The CPU family of an AMD processor (base plus extended family, CPUID leaf 1); 0 for others.
int amd_family() {
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  if (__get_cpuid(0, &eax, &ebx, &ecx, &edx) == 0) return 0;
  const bool amd = ebx == 0x68747541u && edx == 0x69746e65u && ecx == 0x444d4163u;  // "AuthenticAMD"
  if (!amd || __get_cpuid(1, &eax, &ebx, &ecx, &edx) == 0) return 0;
  const int base = int((eax >> 8) & 0xf);
  return base == 0xf ? base + int((eax >> 20) & 0xff) : base;
}
#endif

CpuFeatures detect() {
  CpuFeatures f;
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
  // libgcc's __builtin_cpu_supports also checks (via XGETBV) that the OS saves the wider registers.
  __builtin_cpu_init();
  f.avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && __builtin_cpu_supports("f16c");
  f.avx512 = f.avx2 && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
             __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq");
  f.avx512_bf16 = f.avx512 && __builtin_cpu_supports("avx512bf16");
  f.fast_subnormal_operands = amd_family() >= 0x1a || (amd_family() == 0x19 && f.avx512);
#endif
#if defined(_SC_LEVEL1_DCACHE_SIZE)
  f.l1d_bytes = int(std::max(0L, sysconf(_SC_LEVEL1_DCACHE_SIZE)));
#endif
#if defined(__aarch64__)
  f.neon = true;  // Advanced SIMD is part of the aarch64 baseline
#if defined(__linux__)
  f.sve = (getauxval(AT_HWCAP) & HWCAP_SVE) != 0;
#endif
#endif
  return f;
}

CpuPath choose_active() {
  const CpuPath best = cpu_best_path();
  const char* env = std::getenv("M3_CPU");
  if (env == nullptr || *env == '\0') return best;
  const std::optional<CpuPath> want = parse_cpu_path(env);
  if (!want) {
    std::fprintf(stderr, "m3: warning: M3_CPU=%s is not one of avx512, avx2, sve, neon, generic; using %s\n", env,
                 cpu_path_name(best));
    return best;
  }
  if (!cpu_path_supported(*want)) {
    std::fprintf(stderr, "m3: warning: M3_CPU=%s is not supported by this CPU; using %s\n", env,
                 cpu_path_name(best));
    return best;
  }
  return *want;
}

}  // namespace

const CpuFeatures& cpu_features() {
  static const CpuFeatures features = detect();
  return features;
}

bool cpu_path_supported(CpuPath path) {
  switch (path) {
    case CpuPath::Generic: return true;
    case CpuPath::Avx2: return cpu_features().avx2;
    case CpuPath::Avx512: return cpu_features().avx512;
    case CpuPath::Neon: return cpu_features().neon;
    case CpuPath::Sve: return cpu_features().sve;
  }
  return false;
}

CpuPath cpu_best_path() {
  if (cpu_features().avx512) return CpuPath::Avx512;
  if (cpu_features().avx2) return CpuPath::Avx2;
  if (cpu_features().sve) return CpuPath::Sve;
  if (cpu_features().neon) return CpuPath::Neon;
  return CpuPath::Generic;
}

CpuPath cpu_path_below(CpuPath path) {
  switch (path) {
    case CpuPath::Avx512: return CpuPath::Avx2;
    case CpuPath::Sve: return CpuPath::Neon;
    default: return CpuPath::Generic;
  }
}

bool cpu_path_within(CpuPath lower, CpuPath path) {
  for (CpuPath p = path;; p = cpu_path_below(p)) {
    if (p == lower) return true;
    if (p == CpuPath::Generic) return false;
  }
}

CpuPath cpu_active_path() {
  static const CpuPath active = choose_active();
  return active;
}

const char* cpu_path_name(CpuPath path) {
  switch (path) {
    case CpuPath::Generic: return "generic";
    case CpuPath::Avx2: return "avx2";
    case CpuPath::Avx512: return "avx512";
    case CpuPath::Neon: return "neon";
    case CpuPath::Sve: return "sve";
  }
  return "?";
}

std::optional<CpuPath> parse_cpu_path(std::string_view name) {
  if (name == "avx512") return CpuPath::Avx512;
  if (name == "avx2") return CpuPath::Avx2;
  if (name == "neon") return CpuPath::Neon;
  if (name == "sve") return CpuPath::Sve;
  if (name == "generic") return CpuPath::Generic;
  return std::nullopt;
}

}  // namespace m3
