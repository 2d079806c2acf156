#include "attention/msa_select.h"

#include <algorithm>
#include <cmath>
#include <numeric>

namespace m3 {

namespace {
// Up to this many non-local picks (M3: 15) the one-pass insertion below runs; more, nth_element.
constexpr int kMaxKept = 64;

// vLLM treats NaN block scores as -1e30; doing the same keeps a NaN from poisoning the ordering.
inline float rank_value(float s) { return std::isnan(s) ? -1e30f : s; }

// a ranks before b: higher score, or equal score and smaller block id.
inline bool ranks_before(const float* scores, int32_t a, int32_t b) {
  const float sa = rank_value(scores[a]), sb = rank_value(scores[b]);
  return sa > sb || (sa == sb && a < b);
}
}  // namespace

void msa_select_blocks(const float* block_scores, int64_t local_block, int topk, std::vector<int32_t>& out) {
  out.clear();
  if (local_block + 1 <= topk) {
    for (int32_t b = 0; b <= local_block; ++b) out.push_back(b);
    return;
  }
  const int keep = topk - 1;
  if (keep <= kMaxKept) {
    // One pass in block order keeping the best `keep` so far, best first: a block enters only if
    // it beats the current last (ties keep the earlier, smaller id), so most blocks cost one
    // well-predicted compare; nth_element over a fresh id vector cost ~10x more at 2K blocks.
    float kept_score[kMaxKept];
    int32_t kept_id[kMaxKept];
    int n = 0;
    constexpr int32_t kRun = 8;  // blocks tested at once against the last kept (vectorised compares)
    for (int32_t b = 0; b < int32_t(local_block); ++b) {
      // Once the list is full, nearly every block loses to the last kept: a run of 8 that holds
      // no higher score is passed over with one test. A NaN (ranked -1e30) never beats a last
      // kept of -1e30 or more, so the test needs no NaN case there; below that, block by block.
      if (n == keep && b % kRun == 0 && b + kRun <= int32_t(local_block) && kept_score[n - 1] >= -1e30f) {
        const float last = kept_score[n - 1];
        bool any = false;
        for (int32_t k = 0; k < kRun; ++k) any |= block_scores[b + k] > last;
        if (!any) {
          b += kRun - 1;
          continue;
        }
      }
      const float s = rank_value(block_scores[b]);
      if (n == keep && !(s > kept_score[n - 1])) continue;
      int j = n < keep ? n++ : n - 1;  // the slot it takes: a free one, or the last one's
      for (; j > 0 && s > kept_score[j - 1]; --j) {
        kept_score[j] = kept_score[j - 1];
        kept_id[j] = kept_id[j - 1];
      }
      kept_score[j] = s;
      kept_id[j] = b;
    }
    out.assign(kept_id, kept_id + keep);
    std::sort(out.begin(), out.end());
    out.push_back(int32_t(local_block));
    return;
  }
  // partial_sort with a total order (score, id) selects exactly the stable top-(k-1).
  std::vector<int32_t> ids(static_cast<size_t>(local_block));
  std::iota(ids.begin(), ids.end(), 0);
  std::nth_element(ids.begin(), ids.begin() + keep, ids.end(),
                   [&](int32_t a, int32_t b) { return ranks_before(block_scores, a, b); });
  out.assign(ids.begin(), ids.begin() + keep);
  std::sort(out.begin(), out.end());
  out.push_back(int32_t(local_block));
}

void msa_select_blocks_ref(const float* block_scores, int64_t local_block, int topk, std::vector<int32_t>& out) {
  out.clear();
  const int64_t visible = local_block + 1;
  if (visible <= topk) {
    for (int32_t b = 0; b <= local_block; ++b) out.push_back(b);
    return;
  }
  std::vector<int32_t> ids(static_cast<size_t>(local_block));
  std::iota(ids.begin(), ids.end(), 0);
  std::stable_sort(ids.begin(), ids.end(), [&](int32_t a, int32_t b) {
    return rank_value(block_scores[a]) > rank_value(block_scores[b]);
  });
  out.assign(ids.begin(), ids.begin() + (topk - 1));
  std::sort(out.begin(), out.end());
  out.push_back(int32_t(local_block));
}

}  // namespace m3
