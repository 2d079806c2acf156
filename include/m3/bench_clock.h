#pragma once
// The clock of the benchmarks (`m3 bench`, and the machine bounds they are compared with).
namespace m3 {

// Wall time by default. On a machine shared with other work, cpu = true divides the process's CPU
// time by the thread count instead: time spent descheduled is not counted (sleeping pool workers
// use no CPU time either), which approximates what the code does on an idle machine.
struct BenchClock {
  bool cpu = false;
  int threads = 1;
  double now() const;  // seconds
  double since(double t0) const { return now() - t0; }
};

}  // namespace m3
