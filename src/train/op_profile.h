#pragma once
// Time (and matmul FLOPs) per op of a training step, forward and backward apart, for `m3 bench
// train` (docs/BENCHMARKS.md). A null profile costs nothing; a scope adds its wall time on exit.
#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

namespace m3::train {

struct OpProfile {
  struct Entry {
    std::string name;
    double forward_s = 0.0, backward_s = 0.0;
    double forward_flops = 0.0, backward_flops = 0.0;
  };
  std::vector<Entry> ops;  // in the order they first ran

  Entry& entry(const char* name) {
    for (Entry& e : ops)
      if (e.name == name) return e;
    ops.push_back(Entry{name});
    return ops.back();
  }
};

class OpScope {
 public:
  // flops: the matmul FLOPs of the scope (2 per multiply-add), for the share of the FMA peak.
  OpScope(OpProfile* p, const char* name, bool backward, double flops = 0.0)
      : p_(p), name_(name), backward_(backward), flops_(flops) {
    if (p_) start_ = std::chrono::steady_clock::now();
  }
  ~OpScope() {
    if (!p_) return;
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
    OpProfile::Entry& e = p_->entry(name_);
    (backward_ ? e.backward_s : e.forward_s) += s;
    (backward_ ? e.backward_flops : e.forward_flops) += flops_;
  }
  OpScope(const OpScope&) = delete;
  OpScope& operator=(const OpScope&) = delete;

 private:
  OpProfile* p_;
  const char* name_;
  bool backward_;
  double flops_;
  std::chrono::steady_clock::time_point start_;
};

}  // namespace m3::train
