#pragma once
// The mixture-of-experts layer (spec §3.5) as four steps, so that a process can run only its own
// experts (expert parallelism) and the results still combine to the same bits:
//
//   route     each row's top-k experts and weights                       -> MoeRouting
//   dispatch  for each expert, the (row, slot) entries routed to it       -> MoeDispatch
//   run       a given set of experts over their entries; each entry's output goes to its own slot
//             of a (rows * top_k, hidden) slot buffer, so experts never write to the same place
//   combine   per row: the shared expert's output (weight 1), then the row's slots in ascending
//             expert id, each added as weight * output (a multiply, then an add)
//
// The combine order depends only on the routing, never on which experts ran where or in what
// order, so running the experts in any disjoint sets (on one process or several, in any order) and
// combining gives the bits of running all of them at once (moe_seam_test).
#include <cstdint>
#include <vector>

#include "model/layers.h"

namespace m3 {

struct MoeRouting {
  int64_t rows = 0;
  int top_k = 0;
  std::vector<int32_t> expert;  // (rows, top_k): slot r * top_k + i holds the row's i-th choice
  std::vector<float> weight;    // (rows, top_k): s_e / sum(s) * routed_scaling_factor
};

struct MoeDispatch {
  // Entries of expert e are [offsets[e], offsets[e + 1]), in row order.
  std::vector<int64_t> offsets;  // (experts + 1)
  std::vector<int32_t> rows;     // row of x each entry reads
  std::vector<int32_t> slots;    // slot of the slot buffer each entry writes (row * top_k + i)

  int64_t count(int expert) const { return offsets[size_t(expert) + 1] - offsets[size_t(expert)]; }
};

// Router in fp32 against the fp32 gate weight, then moe_route per row. x (rows, hidden)
MoeRouting moe_route_rows(const ForwardContext& ctx, const MoeWeights& w, const float* x);

MoeDispatch moe_dispatch(const MoeRouting& routing, int experts);

// Runs the experts listed in `experts` (any order, no repeats) over their dispatched rows of x and
// writes each entry's output (hidden values) to its slot of slot_out (rows * top_k, hidden). Slots
// of other experts are left as they are.
void moe_run_experts(const ForwardContext& ctx, const MoeWeights& w, const float* x, const MoeDispatch& dispatch,
                     const std::vector<int32_t>& experts, float* slot_out);

// out (rows, hidden) = shared (rows, hidden; nullptr: no shared expert) + the weighted slots, in the
// order above. Every slot of every row must have been written.
void moe_combine(const MoeRouting& routing, const float* shared, const float* slot_out, int64_t hidden, float* out);

}  // namespace m3
