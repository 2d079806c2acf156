#include <cstdlib>

#include "base/cpu_features.h"
#include "build_info_config.h"  // generated: cmake/build_info.h.in
#include "git_commit.h"         // generated: cmake/git_commit.cmake
#include "m3/version.h"

namespace m3 {

const BuildInfo& build_info() {
  static const BuildInfo info{M3_VERSION, M3_GIT_COMMIT, M3_COMPILER, M3_BUILD_TYPE,
                              M3_CXX_FLAGS, M3_HIGHWAY_VERSION, M3_TARGET_ARCH};
  return info;
}

CpuPathInfo cpu_path_info() {
  CpuPathInfo c;
  c.active = cpu_path_name(cpu_active_path());
  c.best = cpu_path_name(cpu_best_path());
  if (const char* env = std::getenv("M3_CPU")) c.forced = env;
  return c;
}

}  // namespace m3
