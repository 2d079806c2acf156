#pragma once
// Which SIMD code paths this CPU can run, detected at run time (binaries are built for the plain
// architecture baseline, x86-64 or armv8-a, and pick their kernels when they start).
// M3_CPU=avx512|avx2|sve|neon|generic forces a path for tests and benchmarks; a forced path the CPU
// lacks falls back to the best one it has, with a warning.
#include <optional>
#include <string_view>

namespace m3 {

// Two chains, one per architecture, each ordered: a CPU that runs a path runs every path below
// it in its chain (generic < avx2 < avx512 on x86-64; generic < neon < sve on aarch64).
enum class CpuPath { Generic = 0, Avx2 = 1, Avx512 = 2, Neon = 3, Sve = 4 };

struct CpuFeatures {
  bool avx2 = false;         // AVX2 + FMA + F16C, with the OS saving YMM state
  bool avx512 = false;       // AVX-512 F, BW, VL, DQ, with the OS saving ZMM state
  bool avx512_bf16 = false;  // vdpbf16ps (reported only; the fp32-exact kernels do not use it)
  // fp32 multiplies take subnormal operands without a microcode assist. Intel's cores take one
  // (Intel's optimization manuals). Measured: AMD Zen 5 (family 1Ah) does not slow down, Zen 4
  // (family 19h with AVX-512) takes about 1.5 cycles more per multiply (docs/BENCHMARKS.md §0q,
  // §0w). Older AMD cores (Zen 3 is family 19h without AVX-512) are not measured, so false.
  bool fast_subnormal_operands = false;
  bool neon = false;         // Advanced SIMD with fp32 FMA (every aarch64 CPU)
  bool sve = false;          // the Scalable Vector Extension
  int l1d_bytes = 0;         // one core's L1 data cache (sysconf), 0 where the system does not say
};

// Detected once, on first use.
const CpuFeatures& cpu_features();
bool cpu_path_supported(CpuPath path);
// The best path this CPU runs (ignores M3_CPU).
CpuPath cpu_best_path();
// The path kernels use: cpu_best_path(), or M3_CPU's choice when the CPU supports it. Read once.
CpuPath cpu_active_path();

// The next path down the chain (Generic for Avx2 and Neon); Generic has none and returns itself.
CpuPath cpu_path_below(CpuPath path);
// Whether `lower` is `path` or below it in its chain.
bool cpu_path_within(CpuPath lower, CpuPath path);

const char* cpu_path_name(CpuPath path);  // "avx512", "avx2", "sve", "neon", "generic"
std::optional<CpuPath> parse_cpu_path(std::string_view name);

}  // namespace m3
