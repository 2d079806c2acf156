#pragma once
// What this build is and which CPU path it runs on (`m3 --version`, the server's startup line,
// bug reports).
#include <string>

namespace m3 {

struct BuildInfo {
  std::string version;     // the project's version
  std::string commit;      // `git describe --always --dirty` when built; "unknown" outside a checkout
  std::string compiler;    // e.g. "GNU 12.2.0"
  std::string build_type;  // e.g. "Release"
  std::string flags;       // the C++ flags of the build type
  std::string highway;     // Google Highway's version (the SIMD kernels)
  std::string arch;        // the architecture it was built for (x86_64, aarch64)
};
const BuildInfo& build_info();

struct CpuPathInfo {
  std::string active;  // the SIMD path the kernels use: avx512, avx2, sve, neon or generic
  std::string best;    // the best path this CPU supports
  std::string forced;  // M3_CPU's value when set, else ""
};
CpuPathInfo cpu_path_info();

}  // namespace m3
