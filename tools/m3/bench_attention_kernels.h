#pragma once
// `m3 bench attention --kernels`: one dense softmax step's kernels alone, as the prefill walk calls
// them (msa_attention.cpp), on one thread with everything in cache, for every CPU path this machine
// runs: the q·k scores, the online-softmax update and the P·V accumulation of one call.
#include <string>

#include "bench_report.h"
#include "m3/bench_clock.h"
#include "m3/dtype.h"

namespace m3::cli {

struct StepShape {
  std::string name;
  int q_heads, kv_heads, head_dim, block;
};

// One table for `s`: per path, ns per call and GFLOP/s of each kernel and of the whole step, and
// the step against one core's FMA peak (`core_peak` GFLOP/s; 0: not measured).
void report_step_kernels(const StepShape& s, DType page_type, int reps, const BenchClock& clock, double core_peak,
                         BenchReport& report);

}  // namespace m3::cli
