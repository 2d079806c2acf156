#include "vision/vision_attention.h"

#include <algorithm>
#include <cmath>

#include "attention/attention_kernels.h"
#include "m3/error.h"

namespace m3::vision {

namespace {

void check_segments(const std::vector<Segment>& segments, int64_t rows) {
  int64_t at = 0;
  for (const Segment& s : segments) {
    M3_CHECK(s.begin == at && s.end > s.begin, "vision attention: segments must tile the rows in order");
    at = s.end;
  }
  M3_CHECK(at == rows, "vision attention: segments cover ", at, " of ", rows, " rows");
}

}  // namespace

void vision_attention_ref(const float* q, const float* k, const float* v, int64_t rows, int heads, int hd,
                          const std::vector<Segment>& segments, float* out) {
  check_segments(segments, rows);
  const int64_t D = int64_t(heads) * hd;
  const float scale = float(1.0 / std::sqrt(double(hd)));
  std::vector<float> p, acc(static_cast<size_t>(hd));
  for (const Segment& seg : segments)
    for (int hh = 0; hh < heads; ++hh)
      for (int64_t r = seg.begin; r < seg.end; ++r) {
        const float* qr = q + r * D + int64_t(hh) * hd;
        p.assign(size_t(seg.end - seg.begin), 0.0f);
        float mx = -INFINITY;
        for (int64_t j = seg.begin; j < seg.end; ++j) {
          const float* kj = k + j * D + int64_t(hh) * hd;
          float s = 0.0f;
          for (int d = 0; d < hd; ++d) s += qr[d] * kj[d];
          p[size_t(j - seg.begin)] = s * scale;
          mx = std::max(mx, s * scale);
        }
        float sum = 0.0f;
        std::fill(acc.begin(), acc.end(), 0.0f);
        for (int64_t j = seg.begin; j < seg.end; ++j) {
          const float e = std::exp(p[size_t(j - seg.begin)] - mx);
          sum += e;
          const float* vj = v + j * D + int64_t(hh) * hd;
          for (int d = 0; d < hd; ++d) acc[size_t(d)] += e * vj[d];
        }
        float* o = out + r * D + int64_t(hh) * hd;
        for (int d = 0; d < hd; ++d) o[d] = acc[size_t(d)] / sum;
      }
}

void vision_attention(ThreadPool& pool, const float* q, const float* k, const float* v, int64_t rows, int heads,
                      int hd, const std::vector<Segment>& segments, float* out) {
  check_segments(segments, rows);
  constexpr int kTile = 64;   // query rows per work item
  constexpr int kBlock = 128; // keys per online-softmax step
  const int64_t D = int64_t(heads) * hd;
  const float scale = float(1.0 / std::sqrt(double(hd)));
  // kT (heads, hd, rows): one dimension of consecutive keys is contiguous; vh (heads, rows, hd).
  std::vector<float> kT(size_t(rows * D)), vh(size_t(rows * D));
  pool.parallel_for(heads, [&](int64_t h0, int64_t h1) {
    for (int64_t hh = h0; hh < h1; ++hh)
      for (int64_t r = 0; r < rows; ++r)
        for (int d = 0; d < hd; ++d) {
          kT[size_t((hh * hd + d) * rows + r)] = k[r * D + hh * hd + d];
          vh[size_t((hh * rows + r) * hd + d)] = v[r * D + hh * hd + d];
        }
  });
  // Query tiles never cross a segment.
  struct Tile {
    int64_t q0, n, seg_begin, seg_end;
  };
  std::vector<Tile> tiles;
  for (const Segment& s : segments)
    for (int64_t q0 = s.begin; q0 < s.end; q0 += kTile) tiles.push_back({q0, std::min<int64_t>(kTile, s.end - q0), s.begin, s.end});
  const int64_t items = int64_t(tiles.size()) * heads;
  pool.parallel_for(items, [&](int64_t begin, int64_t end) {
    std::vector<float> qt(size_t(kTile) * hd), S(size_t(kTile) * kBlock), m(kTile), l(kTile), o(size_t(kTile) * hd);
    for (int64_t item = begin; item < end; ++item) {
      const int64_t hh = item % heads;
      const Tile& t = tiles[size_t(item / heads)];
      const int nq = int(t.n);
      // The scale goes into q once (instead of into every score).
      for (int i = 0; i < nq; ++i)
        for (int d = 0; d < hd; ++d) qt[size_t(i * hd + d)] = q[(t.q0 + i) * D + hh * hd + d] * scale;
      std::fill(m.begin(), m.end(), -INFINITY);
      std::fill(l.begin(), l.end(), 0.0f);
      std::fill(o.begin(), o.end(), 0.0f);
      for (int64_t k0 = t.seg_begin; k0 < t.seg_end; k0 += kBlock) {
        const int n = int(std::min<int64_t>(kBlock, t.seg_end - k0));
        qk_scores(qt.data(), nq, hd, kT.data() + hh * hd * rows + k0, int(rows), n, S.data(), kBlock);
        softmax_block_update(S.data(), nq, kBlock, n, m.data(), l.data(), o.data(), hd);
        pv_accumulate(S.data(), nq, kBlock, n, vh.data() + (hh * rows + k0) * hd, hd, o.data());
      }
      for (int i = 0; i < nq; ++i) {
        float* dst = out + (t.q0 + i) * D + hh * hd;
        const float inv = 1.0f / l[size_t(i)];
        for (int d = 0; d < hd; ++d) dst[d] = o[size_t(i * hd + d)] * inv;
      }
    }
  });
}

}  // namespace m3::vision
