#pragma once
// How many CPUs this process may use: the default thread count of every pool.
//
// std::thread::hardware_concurrency() counts the machine's online CPUs. A process started under
// `taskset -c 0-7`, in a container with a cpuset, or with a CPU quota (`docker --cpus 2`,
// systemd's CPUQuota=) may use fewer. A pool with more threads than that spins workers against
// each other on one CPU: a decode step that waits on a worker sharing its CPU waits for the
// scheduler, and was measured 30x slower (docs/BENCHMARKS.md §0s).
#include <optional>
#include <string>

namespace m3 {

// The CPUs of the calling thread's affinity mask, capped by the cgroup v2 CPU quota of the
// process (rounded up); at least 1.
int usable_cpus();

// The CPUs a cgroup v2 `cpu.max` line grants: "QUOTA PERIOD" in microseconds gives
// ceil(QUOTA / PERIOD); "max PERIOD" (no quota) and text that is not that format give nothing.
std::optional<int> cpus_of_cpu_max(const std::string& line);

}  // namespace m3
