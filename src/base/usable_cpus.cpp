#include "base/usable_cpus.h"

#include <algorithm>
#include <fstream>
#include <sstream>
#include <thread>

#if defined(__linux__)
#include <sched.h>
#endif

namespace m3 {

namespace {

#if defined(__linux__)
// The process's cgroup v2 path ("0::/PATH" in /proc/self/cgroup), or nothing under cgroup v1.
std::optional<std::string> cgroup_v2_path() {
  std::ifstream in("/proc/self/cgroup");
  std::string line;
  while (std::getline(in, line))
    if (line.rfind("0::", 0) == 0) return line.substr(3);
  return std::nullopt;
}

// The smallest quota on the way from the process's cgroup up to the root: a parent's quota caps
// its children.
std::optional<int> cgroup_quota_cpus() {
  const std::optional<std::string> path = cgroup_v2_path();
  if (!path) return std::nullopt;
  std::optional<int> cpus;
  std::string dir = *path;
  for (;;) {
    std::ifstream in("/sys/fs/cgroup" + dir + "/cpu.max");
    std::string line;
    if (in && std::getline(in, line))
      if (const std::optional<int> c = cpus_of_cpu_max(line)) cpus = cpus ? std::min(*cpus, *c) : *c;
    if (dir.empty() || dir == "/") break;
    const size_t slash = dir.find_last_of('/');
    dir = slash == std::string::npos ? "" : dir.substr(0, slash);
  }
  return cpus;
}
#endif

}  // namespace

std::optional<int> cpus_of_cpu_max(const std::string& line) {
  std::istringstream in(line);
  std::string quota;
  long long period = 0;
  if (!(in >> quota >> period) || period <= 0 || quota == "max") return std::nullopt;
  size_t used = 0;
  long long q = 0;
  try {
    q = std::stoll(quota, &used);
  } catch (...) {
    return std::nullopt;
  }
  if (used != quota.size() || q <= 0) return std::nullopt;
  return int(std::min<long long>((q + period - 1) / period, 1 << 20));
}

int usable_cpus() {
  int cpus = int(std::thread::hardware_concurrency());
#if defined(__linux__)
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof(set), &set) == 0) cpus = CPU_COUNT(&set);
  if (const std::optional<int> quota = cgroup_quota_cpus()) cpus = std::min(cpus, *quota);
#endif
  return std::max(cpus, 1);
}

}  // namespace m3
