// MSA selection and block attention against plain formulas.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <cmath>
#include <cstdlib>
#include <random>
#include <set>
#include <string>
#include <type_traits>
#include <vector>

#include "attention/attention_kernels.h"
#include "attention/attention_kernels_impl.h"
#include "attention/msa_attention.h"
#include "attention/msa_select.h"
#include "m3/dtype.h"

using namespace m3;

TEST(MsaSelect, DenseWhileVisibleBlocksFitTopk) {
  std::vector<float> scores(20, 0.0f);
  std::vector<int32_t> out;
  for (int64_t L = 0; L < 16; ++L) {
    msa_select_blocks(scores.data(), L, 16, out);
    ASSERT_EQ(int64_t(out.size()), L + 1);
    for (int64_t b = 0; b <= L; ++b) EXPECT_EQ(out[size_t(b)], b);
  }
}

TEST(MsaSelect, SeventeenBlocksDropTheWorst) {
  // 17 visible blocks (L = 16): 15 of blocks 0..15 plus the local one.
  std::vector<float> scores(16);
  for (int b = 0; b < 16; ++b) scores[size_t(b)] = float(b);
  scores[3] = -5.0f;
  std::vector<int32_t> out;
  msa_select_blocks(scores.data(), 16, 16, out);
  ASSERT_EQ(out.size(), 16u);
  EXPECT_EQ(std::count(out.begin(), out.end(), 3), 0);
  EXPECT_EQ(out.back(), 16);
}

TEST(MsaSelect, TiesGoToTheSmallerBlockId) {
  // All-zero index q/k at p = 2303 (L = 17): the spec's example selects [0..14] + 17.
  std::vector<float> scores(17, 0.0f);
  std::vector<int32_t> out;
  msa_select_blocks(scores.data(), 17, 16, out);
  std::vector<int32_t> want;
  for (int b = 0; b < 15; ++b) want.push_back(b);
  want.push_back(17);
  EXPECT_EQ(out, want);
}

TEST(MsaSelect, NaNRanksLast) {
  std::vector<float> scores(20, 1.0f);
  scores[0] = NAN;
  std::vector<int32_t> out;
  msa_select_blocks(scores.data(), 20, 16, out);
  EXPECT_EQ(std::count(out.begin(), out.end(), 0), 0);
}

TEST(MsaSelect, FastMatchesReferenceOnRandomScoresWithTies) {
  std::mt19937 rng(7);
  std::vector<int32_t> a, b;
  for (int trial = 0; trial < 2000; ++trial) {
    const int64_t L = std::uniform_int_distribution<int>(0, 300)(rng);
    const int topk = std::uniform_int_distribution<int>(2, 80)(rng);  // both sides of kMaxKept (64)
    std::vector<float> s(size_t(L) + 1);
    const int levels = std::uniform_int_distribution<int>(1, 8)(rng);  // few levels -> many ties
    for (float& x : s) x = float(std::uniform_int_distribution<int>(0, levels)(rng));
    msa_select_blocks(s.data(), L, topk, a);
    msa_select_blocks_ref(s.data(), L, topk, b);
    ASSERT_EQ(a, b) << "L=" << L << " topk=" << topk;
    ASSERT_EQ(int64_t(a.size()), std::min<int64_t>(L + 1, topk));
    ASSERT_EQ(a.back(), L);
  }
}

// NaN ranks as -1e30 (vLLM's rule), so it ties with -1e30 and beats -inf and -3e30: runs of such
// scores next to ordinary ones, on both sides of the fast path's run of 8 blocks.
TEST(MsaSelect, FastMatchesReferenceWithNaNAndInfinities) {
  std::mt19937 rng(11);
  const float special[] = {NAN, -INFINITY, INFINITY, -1e30f, -3e30f, 0.0f, -0.0f};
  const float low_values[] = {NAN, -INFINITY, -3e30f, -1e30f};
  std::vector<int32_t> a, b;
  for (int trial = 0; trial < 2000; ++trial) {
    const int64_t L = std::uniform_int_distribution<int>(0, 300)(rng);
    const int topk = std::uniform_int_distribution<int>(2, 80)(rng);
    const int rare = std::uniform_int_distribution<int>(1, 4)(rng);  // 1 in rare is special
    const bool low = trial % 3 == 0;  // only NaN and what ranks at or below it: a last kept under -1e30
    std::vector<float> s(size_t(L) + 1);
    for (float& x : s) {
      if (low) x = low_values[rng() % 4];
      else x = rng() % uint32_t(rare) == 0 ? special[rng() % 7] : float(std::uniform_int_distribution<int>(-3, 3)(rng));
    }
    msa_select_blocks(s.data(), L, topk, a);
    msa_select_blocks_ref(s.data(), L, topk, b);
    ASSERT_EQ(a, b) << "L=" << L << " topk=" << topk;
  }
}

namespace {

// Roughly normal values (four 16-bit uniforms summed and scaled to mean 0, variance 1) from
// integer arithmetic and one conversion: std::normal_distribution's logarithms were most of this
// file's time, and 300x slower under qemu's software floating point (scripts/test_aarch64.sh).
std::vector<float> randn(std::mt19937& rng, size_t n) {
  uint64_t state = (uint64_t(rng()) << 32) | rng();
  std::vector<float> v(n);
  for (float& x : v) {
    state += 0x9e3779b97f4a7c15ull;  // splitmix64
    uint64_t z = state;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    z ^= z >> 31;
    const int32_t sum = int32_t(z & 0xffff) + int32_t((z >> 16) & 0xffff) + int32_t((z >> 32) & 0xffff) + int32_t(z >> 48);
    x = (float(sum) - 131070.0f) * (1.7320508f / 65536.0f);  // the sum's mean is 2 x 65535, its variance 4/12
  }
  return v;
}

}  // namespace

TEST(AttentionKernels, ScoresAndBlockMaxMatchDotProducts) {
  std::mt19937 rng(10);
  for (int dim : {16, 32, 128, 7})
    for (int n_keys : {1, 15, 16, 17, 64, 100, 128})
      for (int nq : {1, 2, 3, 4, 6, 7, 9, 13, 16}) {  // tiles of 4, 6 (AVX2), 8 or 16 queries plus remainders
        const int stride = 128;
        auto q = randn(rng, size_t(nq * dim));
        auto kT = randn(rng, size_t(dim * stride));
        std::vector<float> S(size_t(nq * stride)), mx(static_cast<size_t>(nq));
        qk_scores(q.data(), nq, dim, kT.data(), stride, n_keys, S.data(), stride);
        qk_block_max(q.data(), nq, dim, kT.data(), stride, n_keys, mx.data());
        for (int i = 0; i < nq; ++i) {
          double best = -1e300;
          for (int t = 0; t < n_keys; ++t) {
            double s = 0;
            for (int d = 0; d < dim; ++d) s += double(q[size_t(i * dim + d)]) * kT[size_t(d * stride + t)];
            EXPECT_NEAR(S[size_t(i * stride + t)], s, 1e-4 * (1 + std::fabs(s)));
            best = std::max(best, s);
          }
          EXPECT_NEAR(mx[size_t(i)], best, 1e-4 * (1 + std::fabs(best)));
        }
      }
}

namespace {

// softmax(s) · v in float64 for `heads` rows of `total` scores (row stride total) and v (total, hd).
std::vector<double> softmax_pv_reference(const std::vector<float>& s_all, const std::vector<float>& v, int heads,
                                         int total, int hd) {
  std::vector<double> out(size_t(heads) * hd);
  for (int h = 0; h < heads; ++h) {
    double mx = -1e300, sum = 0;
    for (int t = 0; t < total; ++t) mx = std::max(mx, double(s_all[size_t(h * total + t)]));
    std::vector<double> w(static_cast<size_t>(total));
    for (int t = 0; t < total; ++t) sum += w[size_t(t)] = std::exp(s_all[size_t(h * total + t)] - mx);
    for (int d = 0; d < hd; ++d)
      for (int t = 0; t < total; ++t) out[size_t(h * hd + d)] += w[size_t(t)] / sum * v[size_t(t * hd + d)];
  }
  return out;
}

}  // namespace

TEST(AttentionKernels, OnlineSoftmaxOverBlocksEqualsOneSoftmax) {
  std::mt19937 rng(11);
  for (int hd : {16, 32, 128, 12}) {
    const int heads = 5, B = 48;
    const std::vector<int> block_keys = {48, 48, 17};  // last block cut by causality
    int total = 0;
    for (int n : block_keys) total += n;
    auto s_all = randn(rng, size_t(heads * total));
    auto v_all = randn(rng, size_t(total * hd));
    std::vector<float> o(size_t(heads * hd), 0.0f), m(heads, -INFINITY), l(heads, 0.0f), S(size_t(heads * B));
    int off = 0;
    for (int n : block_keys) {
      for (int h = 0; h < heads; ++h)
        for (int t = 0; t < n; ++t) S[size_t(h * B + t)] = s_all[size_t(h * total + off + t)];
      softmax_block_update(S.data(), heads, B, n, m.data(), l.data(), o.data(), hd);
      pv_accumulate(S.data(), heads, B, n, v_all.data() + size_t(off) * hd, hd, o.data());
      off += n;
    }
    const std::vector<double> ref = softmax_pv_reference(s_all, v_all, heads, total, hd);
    for (int h = 0; h < heads; ++h)
      for (int d = 0; d < hd; ++d) EXPECT_NEAR(o[size_t(h * hd + d)] / l[size_t(h)], ref[size_t(h * hd + d)], 2e-5) << "hd " << hd;
  }
}

namespace {

// Random bf16 bit patterns of normal values, and their exact fp32 widening.
void randn_bf16(std::mt19937& rng, size_t n, std::vector<uint16_t>& bits, std::vector<float>& wide) {
  auto v = randn(rng, n);
  bits.resize(n);
  wide.resize(n);
  for (size_t i = 0; i < n; ++i) {
    bits[i] = f32_to_bf16(v[i]);
    wide[i] = bf16_to_f32(bits[i]);
  }
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

}  // namespace

// bf16 K/V (a bf16 cache) must give exactly what the same kernel gives on their fp32 widening (only
// the load differs), which in turn matches the plain dot products.
TEST(AttentionKernels, Bf16KeysAndValuesEqualTheirFp32Widening) {
  std::mt19937 rng(12);
  for (int dim : {16, 32, 128, 7})
    for (int n_keys : {1, 15, 16, 17, 64, 100, 128})
      for (int nq : {1, 4, 9}) {
        const int stride = 128;
        auto q = randn(rng, size_t(nq * dim));
        std::vector<uint16_t> kb;
        std::vector<float> kw;
        randn_bf16(rng, size_t(dim * stride), kb, kw);
        std::vector<float> S(size_t(nq * stride)), Sw(S.size()), mx(static_cast<size_t>(nq)), mxw(static_cast<size_t>(nq));
        qk_scores(q.data(), nq, dim, kb.data(), stride, n_keys, S.data(), stride);
        qk_scores(q.data(), nq, dim, kw.data(), stride, n_keys, Sw.data(), stride);
        qk_block_max(q.data(), nq, dim, kb.data(), stride, n_keys, mx.data());
        qk_block_max(q.data(), nq, dim, kw.data(), stride, n_keys, mxw.data());
        // The prefetch hint (the next page) never changes a result.
        std::vector<float> Sp(S.size()), mxp(mx.size());
        qk_scores(q.data(), nq, dim, kb.data(), stride, n_keys, Sp.data(), stride, kw.data(), kw.size() * 4);
        qk_block_max(q.data(), nq, dim, kb.data(), stride, n_keys, mxp.data(), kw.data(), kw.size() * 4);
        EXPECT_TRUE(same_bits(mx, mxp));
        for (int i = 0; i < nq; ++i)
          for (int t = 0; t < n_keys; ++t) ASSERT_EQ(S[size_t(i * stride + t)], Sp[size_t(i * stride + t)]);
        for (int i = 0; i < nq; ++i)
          for (int t = 0; t < n_keys; ++t) {
            ASSERT_EQ(S[size_t(i * stride + t)], Sw[size_t(i * stride + t)]) << "dim " << dim << " keys " << n_keys;
            double s = 0;
            for (int d = 0; d < dim; ++d) s += double(q[size_t(i * dim + d)]) * kw[size_t(d * stride + t)];
            EXPECT_NEAR(S[size_t(i * stride + t)], s, 1e-4 * (1 + std::fabs(s)));
          }
        EXPECT_TRUE(same_bits(mx, mxw));
      }
  for (int hd : {16, 32, 48, 128, 112, 12})
    for (int n_keys : {1, 17, 48})
      for (int heads : {1, 2, 3, 5, 7, 8, 13}) {  // head tiles of 6 (AVX2) or 4 plus a remainder; dim tiles of 64 plus 16-48
        const int ld = 48;
        auto P = randn(rng, size_t(heads * ld));
        std::vector<uint16_t> vb;
        std::vector<float> vw;
        randn_bf16(rng, size_t(n_keys * hd), vb, vw);
        auto o0 = randn(rng, size_t(heads * hd));
        std::vector<float> o = o0, ow = o0;
        pv_accumulate(P.data(), heads, ld, n_keys, vb.data(), hd, o.data());
        pv_accumulate(P.data(), heads, ld, n_keys, vw.data(), hd, ow.data());
        std::vector<float> op = o0;
        pv_accumulate(P.data(), heads, ld, n_keys, vb.data(), hd, op.data(), P.data(), P.size() * 4);
        ASSERT_TRUE(same_bits(o, op));
        ASSERT_TRUE(same_bits(o, ow)) << "hd " << hd << " keys " << n_keys;
        for (int h = 0; h < heads; ++h)
          for (int d = 0; d < hd; ++d) {
            double ref = o0[size_t(h * hd + d)];
            for (int t = 0; t < n_keys; ++t) ref += double(P[size_t(h * ld + t)]) * vw[size_t(t * hd + d)];
            EXPECT_NEAR(o[size_t(h * hd + d)], ref, 1e-4 * (1 + std::fabs(ref))) << "hd " << hd << " heads " << heads;
          }
      }
}

// E4M3 K/V with a power-of-two scale per key (per value row) must give exactly what the same kernel
// gives on their dequantized fp32 copy: the scale multiplies a key's score (a value row's weight)
// instead of its elements, which for a power of two changes no bit.
TEST(AttentionKernels, Fp8KeysAndValuesEqualTheirDequantizedFp32) {
  std::mt19937 rng(13);
  auto random_fp8 = [&](size_t n, std::vector<uint8_t>& codes) {
    codes.resize(n);
    for (auto& c : codes) {
      do c = uint8_t(rng()); while ((c & 0x7f) == 0x7f);  // no NaN codes
    }
  };
  auto random_scales = [&](size_t n) {
    std::vector<uint8_t> s(n);
    for (auto& x : s) x = uint8_t(118 + rng() % 12);  // 2^-9 .. 2^2
    return s;
  };
  for (int dim : {16, 32, 128, 7})
    for (int n_keys : {1, 15, 16, 17, 64, 100, 128})
      for (int nq : {1, 4, 9}) {
        const int stride = 128;
        auto q = randn(rng, size_t(nq * dim));
        std::vector<uint8_t> kb;
        random_fp8(size_t(dim * stride), kb);
        const std::vector<uint8_t> ks = random_scales(size_t(stride));
        std::vector<float> kw(kb.size());
        for (int d = 0; d < dim; ++d)
          for (int t = 0; t < stride; ++t)
            kw[size_t(d * stride + t)] = f8e4m3_to_f32(kb[size_t(d * stride + t)]) * ue8m0_to_f32(ks[size_t(t)]);
        std::vector<float> S(size_t(nq * stride)), Sw(S.size()), mx(static_cast<size_t>(nq)), mxw(static_cast<size_t>(nq));
        qk_scores(q.data(), nq, dim, kb.data(), ks.data(), stride, n_keys, S.data(), stride);
        qk_scores(q.data(), nq, dim, kw.data(), stride, n_keys, Sw.data(), stride);
        qk_block_max(q.data(), nq, dim, kb.data(), ks.data(), stride, n_keys, mx.data());
        qk_block_max(q.data(), nq, dim, kw.data(), stride, n_keys, mxw.data());
        for (int i = 0; i < nq; ++i)
          for (int t = 0; t < n_keys; ++t)
            ASSERT_EQ(S[size_t(i * stride + t)], Sw[size_t(i * stride + t)]) << "dim " << dim << " keys " << n_keys;
        EXPECT_TRUE(same_bits(mx, mxw)) << "dim " << dim << " keys " << n_keys << " nq " << nq;
      }
  for (int hd : {16, 32, 48, 128, 112, 12})
    for (int n_keys : {1, 17, 48})
      for (int heads : {1, 2, 3, 5, 8}) {
        const int ld = 48;
        auto P = randn(rng, size_t(heads * ld));
        std::vector<uint8_t> vb;
        random_fp8(size_t(n_keys * hd), vb);
        const std::vector<uint8_t> vs = random_scales(size_t(n_keys));
        std::vector<float> vw(vb.size());
        for (int t = 0; t < n_keys; ++t)
          for (int d = 0; d < hd; ++d)
            vw[size_t(t * hd + d)] = f8e4m3_to_f32(vb[size_t(t * hd + d)]) * ue8m0_to_f32(vs[size_t(t)]);
        auto o0 = randn(rng, size_t(heads * hd));
        std::vector<float> o = o0, ow = o0;
        pv_accumulate(P.data(), heads, ld, n_keys, vb.data(), vs.data(), hd, o.data());
        pv_accumulate(P.data(), heads, ld, n_keys, vw.data(), hd, ow.data());
        ASSERT_TRUE(same_bits(o, ow)) << "hd " << hd << " keys " << n_keys << " heads " << heads;
      }
}

namespace {

// Every CPU path this machine runs, each with its own table; with M3_CPU set, only the path it
// forces (scripts/test_aarch64.sh checks SVE at other vector lengths that way, without running the
// generic and NEON kernels again under qemu).
std::vector<CpuPath> runnable_paths() {
  if (const char* forced = std::getenv("M3_CPU"); forced != nullptr && *forced != 0) return {cpu_active_path()};
  std::vector<CpuPath> out;
  for (CpuPath p : {CpuPath::Generic, CpuPath::Avx2, CpuPath::Avx512, CpuPath::Neon, CpuPath::Sve})
    if (cpu_path_supported(p)) out.push_back(p);
  return out;
}

// Float or bf16 keys and values from one fp32 draw (bf16: rounded, and the fp32 twin widened).
template <typename T>
std::vector<T> stored(const std::vector<float>& wide) {
  if constexpr (std::is_same_v<T, float>) return wide;
  else {
    std::vector<uint16_t> b(wide.size());
    for (size_t i = 0; i < wide.size(); ++i) b[i] = f32_to_bf16(wide[i]);
    return b;
  }
}
float widened(float x) { return x; }
float widened(uint16_t b) { return bf16_to_f32(b); }

// The scores, block maxima, softmax and P.V of every path against float64 formulas, at the head
// sizes models use (M3's 128, the ViT's 80, 32/64/96/256) and odd ones, with key counts that cut
// every vector width; key rows both padded (a block page) and exactly n_keys wide (nothing past
// them may be read). The SIMD paths (avx2, avx512, neon, sve) must agree bit for bit: one FMA chain
// per output in the same order, one exp, one fixed 16-lane sum order (attention_kernels_simd.cpp).
template <typename T>
void check_every_path(uint32_t seed) {
  std::mt19937 rng(seed);
  const std::vector<CpuPath> paths = runnable_paths();
  for (int dim : {7, 12, 16, 32, 64, 80, 96, 128, 256})
    for (int n_keys : {1, 5, 15, 16, 17, 33, 64, 100, 128})
      for (int nq : {1, 2, 3, 4, 5, 9, 16})
        for (int stride : {128, n_keys}) {
          const auto q = randn(rng, size_t(nq * dim));
          std::vector<float> kw = randn(rng, size_t(dim * stride));
          const std::vector<T> kT_all = stored<T>(kw);
          // stride 128: the keys start `off` into each row and the buffer ends with the last row's
          // n_keys-th key (vision attention passes such views), so no read may go past that.
          const int off = stride == 128 ? 128 - n_keys : 0;
          const std::vector<T> kT_view(kT_all.begin(), kT_all.end() - (stride - off - n_keys));
          for (size_t i = 0; i < kw.size(); ++i) kw[i] = widened(kT_all[i]);
          const T* kT = kT_view.data() + off;
          // The float64 scores and block maxima, once for all paths (qemu runs this test slowly).
          std::vector<double> ref(size_t(nq * n_keys)), best(size_t(nq), -1e300);
          for (int i = 0; i < nq; ++i)
            for (int t = 0; t < n_keys; ++t) {
              double r = 0;
              for (int d = 0; d < dim; ++d) r += double(q[size_t(i * dim + d)]) * kw[size_t(d * stride + off + t)];
              ref[size_t(i * n_keys + t)] = r;
              best[size_t(i)] = std::max(best[size_t(i)], r);
            }
          std::vector<float> simd_S, simd_max;
          for (CpuPath p : paths) {
            const AttentionKernels& k = attention_kernels_for(p);
            std::vector<float> S(size_t(nq * stride), 7.0f), mx(static_cast<size_t>(nq));
            if constexpr (std::is_same_v<T, float>) {
              k.qk_scores_f32(q.data(), nq, dim, kT, stride, n_keys, S.data(), stride, nullptr, 0);
              k.qk_block_max_f32(q.data(), nq, dim, kT, stride, n_keys, mx.data(), nullptr, 0);
            } else {
              k.qk_scores_bf16(q.data(), nq, dim, kT, stride, n_keys, S.data(), stride, nullptr, 0);
              k.qk_block_max_bf16(q.data(), nq, dim, kT, stride, n_keys, mx.data(), nullptr, 0);
            }
            const std::string where = std::string(cpu_path_name(p)) + " dim " + std::to_string(dim) + " keys " +
                                      std::to_string(n_keys) + " nq " + std::to_string(nq) + " stride " +
                                      std::to_string(stride);
            for (int i = 0; i < nq; ++i) {
              for (int t = 0; t < n_keys; ++t) {
                const double r = ref[size_t(i * n_keys + t)];
                ASSERT_NEAR(S[size_t(i * stride + t)], r, 1e-4 * (1 + std::fabs(r))) << where;
              }
              for (int t = n_keys; t < stride; ++t) ASSERT_EQ(S[size_t(i * stride + t)], 7.0f) << where << ": wrote past n_keys";
              ASSERT_NEAR(mx[size_t(i)], best[size_t(i)], 1e-4 * (1 + std::fabs(best[size_t(i)]))) << where;
            }
            if (p == CpuPath::Generic) continue;
            if (simd_S.empty()) {
              simd_S = S;
              simd_max = mx;
            } else {
              ASSERT_TRUE(same_bits(S, simd_S)) << where << ": scores differ from the other SIMD paths";
              ASSERT_TRUE(same_bits(mx, simd_max)) << where << ": block maxima differ from the other SIMD paths";
            }
          }
        }

  for (int hd : {7, 12, 16, 32, 48, 64, 80, 96, 112, 128, 256})
    for (int heads : {1, 2, 3, 4, 5, 6, 7, 8, 13, 16, 70})  // 70: the softmax passes take 64 heads at a time
      for (const std::vector<int>& blocks : {std::vector<int>{48, 48, 17}, std::vector<int>{5}, std::vector<int>{16, 1}}) {
        const int ld = blocks[0];
        int total = 0;
        for (int n : blocks) total += n;
        const auto s_all = randn(rng, size_t(heads * total));
        std::vector<float> v_wide = randn(rng, size_t(total * hd));
        const std::vector<T> v_all = stored<T>(v_wide);
        for (size_t i = 0; i < v_wide.size(); ++i) v_wide[i] = widened(v_all[i]);
        const std::vector<double> ref = softmax_pv_reference(s_all, v_wide, heads, total, hd);
        std::vector<float> simd_o, simd_l, simd_S;
        for (CpuPath p : paths) {
          const AttentionKernels& k = attention_kernels_for(p);
          std::vector<float> o(size_t(heads * hd), 0.0f), m(size_t(heads), -INFINITY), l(size_t(heads), 0.0f);
          std::vector<float> S(size_t(heads * ld)), last_S;
          int off = 0;
          for (int n : blocks) {
            for (int h = 0; h < heads; ++h)
              for (int t = 0; t < n; ++t) S[size_t(h * ld + t)] = s_all[size_t(h * total + off + t)];
            k.softmax_block_update(S.data(), heads, ld, n, m.data(), l.data(), o.data(), hd);
            const T* v = v_all.data() + size_t(off) * hd;
            // Exactly the n rows of this block (a full-width read of the last row would leave them).
            std::vector<T> v_block(v, v + size_t(n) * hd);
            if constexpr (std::is_same_v<T, float>) k.pv_f32(S.data(), heads, ld, n, v_block.data(), hd, o.data(), nullptr, 0);
            else k.pv_bf16(S.data(), heads, ld, n, v_block.data(), hd, o.data(), nullptr, 0);
            off += n;
          }
          last_S = S;
          const std::string where = std::string(cpu_path_name(p)) + " hd " + std::to_string(hd) + " heads " +
                                    std::to_string(heads) + " blocks " + std::to_string(blocks.size());
          for (int h = 0; h < heads; ++h)
            for (int d = 0; d < hd; ++d)
              ASSERT_NEAR(o[size_t(h * hd + d)] / l[size_t(h)], ref[size_t(h * hd + d)], 2e-5) << where;
          if (p == CpuPath::Generic) continue;
          if (simd_o.empty()) {
            simd_o = o;
            simd_l = l;
            simd_S = last_S;
          } else {
            ASSERT_TRUE(same_bits(o, simd_o)) << where << ": P.V differs from the other SIMD paths";
            ASSERT_TRUE(same_bits(l, simd_l)) << where << ": softmax sums differ from the other SIMD paths";
            ASSERT_TRUE(same_bits(last_S, simd_S)) << where << ": softmax weights differ from the other SIMD paths";
          }
        }
      }
}

}  // namespace

TEST(AttentionKernels, EveryPathMatchesTheReferenceAndSimdPathsAgreeBitwiseF32) { check_every_path<float>(21); }
TEST(AttentionKernels, EveryPathMatchesTheReferenceAndSimdPathsAgreeBitwiseBf16) { check_every_path<uint16_t>(22); }

// A softmax step over several blocks read in place (qk_scores_paged, pv_accumulate_paged) gives the
// bits of one block holding the same keys in order, and the index branch's block maxima of several
// pages at once (qk_block_max_paged) those of each page alone, on every path: block sizes that are and are not
// a multiple of the vector width, a short last page (NaN past its keys), few and many queries (17 and
// 40 take the block maxima's queries-in-lanes tiles on every SIMD path).
// Every page is its own allocation (the last V page exactly its rows), so ASan sees any read past one.
template <typename T>
void check_paged_steps(uint32_t seed) {
  std::mt19937 rng(seed);
  auto draw = [&](size_t n, std::vector<T>& out) {
    out.resize(n);
    for (auto& x : out) {
      if constexpr (std::is_same_v<T, float>) x = std::normal_distribution<float>()(rng);
      else if constexpr (std::is_same_v<T, uint16_t>) x = f32_to_bf16(std::normal_distribution<float>()(rng));
      else do x = uint8_t(rng()); while ((x & 0x7f) == 0x7f);  // E4M3, no NaN codes
    }
  };
  auto draw_scales = [&](size_t n) {
    std::vector<uint8_t> s(n);
    for (auto& x : s) x = uint8_t(118 + rng() % 12);
    return s;
  };
  constexpr bool kFp8 = std::is_same_v<T, uint8_t>;
  for (CpuPath path : runnable_paths()) {
    const AttentionKernels& k = attention_kernels_for(path);
    for (int B : {4, 8, 12, 16, 32, 64, 128})
      for (int pages : {1, 2, 3, 5})
        for (int dim : {7, 32, 80})
          for (int nq : {1, 2, 3, 6, 9, 17, 40}) {
            const int last = 1 + int(rng() % uint32_t(B));
            const int n_keys = (pages - 1) * B + last, hd = dim;
            std::vector<std::vector<T>> kp(static_cast<size_t>(pages)), vp(static_cast<size_t>(pages));
            std::vector<std::vector<uint8_t>> ksc(static_cast<size_t>(pages)), vsc(static_cast<size_t>(pages));
            std::vector<const T*> kptr, vptr;
            std::vector<const uint8_t*> ksp, vsp;
            // The same keys and values as one block: K [dim][n_keys], V [n_keys][hd], scales in order.
            std::vector<T> kT(size_t(dim) * n_keys), v(size_t(n_keys) * hd);
            std::vector<uint8_t> ks, vs;
            for (int p = 0; p < pages; ++p) {
              const int rows = p + 1 < pages ? B : last;
              draw(size_t(dim) * B, kp[size_t(p)]);
              draw(size_t(rows) * hd, vp[size_t(p)]);
              ksc[size_t(p)] = draw_scales(size_t(B));
              vsc[size_t(p)] = draw_scales(size_t(rows));
              kptr.push_back(kp[size_t(p)].data());
              vptr.push_back(vp[size_t(p)].data());
              ksp.push_back(ksc[size_t(p)].data());
              vsp.push_back(vsc[size_t(p)].data());
              for (int d = 0; d < dim; ++d)
                for (int t = 0; t < rows; ++t) kT[size_t(d) * n_keys + p * B + t] = kp[size_t(p)][size_t(d) * B + t];
              std::copy(vp[size_t(p)].begin(), vp[size_t(p)].end(), v.begin() + size_t(p) * B * hd);
              ks.insert(ks.end(), ksc[size_t(p)].begin(), ksc[size_t(p)].begin() + rows);
              vs.insert(vs.end(), vsc[size_t(p)].begin(), vsc[size_t(p)].end());
            }
            const int ld = pages * B + 3;
            const auto q = randn(rng, size_t(nq) * dim);
            // The scores read the last K page with NaN past its `last` keys (what a page may hold
            // there is not theirs to use): none of it may reach a stored score.
            std::vector<T> poisoned = kp.back();
            for (int d = 0; d < dim; ++d)
              for (int t = last; t < B; ++t) {
                if constexpr (kFp8) poisoned[size_t(d) * B + t] = 0x7f;
                else if constexpr (std::is_same_v<T, float>) poisoned[size_t(d) * B + t] = NAN;
                else poisoned[size_t(d) * B + t] = 0x7fc0;
              }
            std::vector<const T*> kptr_scores = kptr;
            kptr_scores.back() = poisoned.data();
            std::vector<float> S(size_t(nq) * ld, 7.0f), S1 = S;
            if constexpr (kFp8) {
              k.qk_scores_paged_fp8(q.data(), nq, dim, kptr_scores.data(), ksp.data(), B, n_keys, S.data(), ld);
              k.qk_scores_fp8(q.data(), nq, dim, kT.data(), ks.data(), n_keys, n_keys, S1.data(), ld, nullptr, 0);
            } else if constexpr (std::is_same_v<T, float>) {
              k.qk_scores_paged_f32(q.data(), nq, dim, kptr_scores.data(), B, n_keys, S.data(), ld);
              k.qk_scores_f32(q.data(), nq, dim, kT.data(), n_keys, n_keys, S1.data(), ld, nullptr, 0);
            } else {
              k.qk_scores_paged_bf16(q.data(), nq, dim, kptr_scores.data(), B, n_keys, S.data(), ld);
              k.qk_scores_bf16(q.data(), nq, dim, kT.data(), n_keys, n_keys, S1.data(), ld, nullptr, 0);
            }
            const std::string where = std::string(cpu_path_name(path)) + " B " + std::to_string(B) + " pages " +
                                      std::to_string(pages) + " last " + std::to_string(last) + " dim " +
                                      std::to_string(dim) + " nq " + std::to_string(nq);
            ASSERT_TRUE(same_bits(S, S1)) << where << ": paged scores differ from one block's (or wrote past n_keys)";
            // Block maxima of whole pages at once (the index branch): each page's qk_block_max.
            const int mstride = nq + 2;
            std::vector<float> mx(size_t(pages) * mstride, 5.0f), mx1 = mx;
            for (int p = 0; p < pages; ++p) {
              float* m1 = mx1.data() + size_t(p) * mstride;
              if constexpr (kFp8) k.qk_block_max_fp8(q.data(), nq, dim, kptr[size_t(p)], ksp[size_t(p)], B, B, m1, nullptr, 0);
              else if constexpr (std::is_same_v<T, float>) k.qk_block_max_f32(q.data(), nq, dim, kptr[size_t(p)], B, B, m1, nullptr, 0);
              else k.qk_block_max_bf16(q.data(), nq, dim, kptr[size_t(p)], B, B, m1, nullptr, 0);
            }
            if constexpr (kFp8) k.qk_block_max_paged_fp8(q.data(), nq, dim, kptr.data(), ksp.data(), pages, B, mx.data(), mstride);
            else if constexpr (std::is_same_v<T, float>) k.qk_block_max_paged_f32(q.data(), nq, dim, kptr.data(), pages, B, mx.data(), mstride);
            else k.qk_block_max_paged_bf16(q.data(), nq, dim, kptr.data(), pages, B, mx.data(), mstride);
            ASSERT_TRUE(same_bits(mx, mx1)) << where << ": paged block maxima differ from each page's (or wrote past nq)";
            const auto P = randn(rng, size_t(nq) * ld);
            const auto o0 = randn(rng, size_t(nq) * hd);
            std::vector<float> o = o0, o1 = o0;
            if constexpr (kFp8) {
              k.pv_paged_fp8(P.data(), nq, ld, n_keys, vptr.data(), vsp.data(), B, hd, o.data());
              k.pv_fp8(P.data(), nq, ld, n_keys, v.data(), vs.data(), hd, o1.data(), nullptr, 0);
            } else if constexpr (std::is_same_v<T, float>) {
              k.pv_paged_f32(P.data(), nq, ld, n_keys, vptr.data(), B, hd, o.data());
              k.pv_f32(P.data(), nq, ld, n_keys, v.data(), hd, o1.data(), nullptr, 0);
            } else {
              k.pv_paged_bf16(P.data(), nq, ld, n_keys, vptr.data(), B, hd, o.data());
              k.pv_bf16(P.data(), nq, ld, n_keys, v.data(), hd, o1.data(), nullptr, 0);
            }
            ASSERT_TRUE(same_bits(o, o1)) << where << ": paged P.V differs from one block's";
          }
  }
}

TEST(AttentionKernels, PagedStepsGiveOneBlocksBitsF32) { check_paged_steps<float>(31); }
TEST(AttentionKernels, PagedStepsGiveOneBlocksBitsBf16) { check_paged_steps<uint16_t>(32); }
TEST(AttentionKernels, PagedStepsGiveOneBlocksBitsFp8) { check_paged_steps<uint8_t>(33); }

TEST(AttentionKernels, ActivePathIsTheBestOneOrM3Cpu) {
  std::printf("attention kernels here: %s (best path %s)\n", attention_kernel_name(), cpu_path_name(cpu_best_path()));
  EXPECT_STREQ(attention_kernel_name(), attention_kernels_for(cpu_active_path()).name);
}

namespace {

// The whole attention of a run of rows against a naive double-precision model of spec §4:
// token scores, block max, stable top-(k-1) + local, softmax over the selected causal keys.
struct NaiveCase {
  int block = 16, topk = 4, q_heads = 4, kv_heads = 2, head_dim = 32, index_dim = 32;
  int64_t context = 0;  // tokens before the run
  int64_t rows = 1;
  DType cache = DType::F32;  // BF16, F8_E4M3: the naive model reads K, V and index keys as stored
};

double run_case(const NaiveCase& c, bool sparse, int threads, uint32_t seed) {
  std::mt19937 rng(seed);
  const int64_t T = c.context + c.rows;
  KvCacheShape shape;
  shape.num_layers = 1;
  shape.block_size = c.block;
  shape.kv_heads = c.kv_heads;
  shape.head_dim = c.head_dim;
  shape.index_dim = c.index_dim;
  shape.layer_has_index = {true};
  shape.dtype = c.cache;
  KvCache cache(shape);
  cache.ensure_capacity(T);
  auto K = randn(rng, size_t(T * c.kv_heads * c.head_dim));
  auto V = randn(rng, size_t(T * c.kv_heads * c.head_dim));
  auto IK = randn(rng, size_t(T * c.index_dim));
  // Quantise index keys onto a coarse grid so that exact ties between blocks occur.
  for (float& x : IK) x = std::round(x * 2.0f) / 2.0f;
  if (c.cache == DType::BF16) {  // what the cache will hold (index keys on the grid are exact in bf16)
    for (float& x : K) x = round_to_bf16(x);
    for (float& x : V) x = round_to_bf16(x);
    for (float& x : IK) x = round_to_bf16(x);
  }
  for (int64_t t = 0; t < T; ++t) {
    for (int g = 0; g < c.kv_heads; ++g)
      cache.write_kv(0, t, g, K.data() + (t * c.kv_heads + g) * c.head_dim, V.data() + (t * c.kv_heads + g) * c.head_dim);
    cache.write_index_k(0, t, IK.data() + t * c.index_dim);
  }
  cache.set_length(T);
  if (c.cache == DType::F8_E4M3) {  // the naive model reads what the cache holds (each vector dequantized)
    for (int64_t t = 0; t < T; ++t) {
      for (int g = 0; g < c.kv_heads; ++g)
        cache.read_kv(0, t, g, K.data() + (t * c.kv_heads + g) * c.head_dim, V.data() + (t * c.kv_heads + g) * c.head_dim);
      cache.read_index_k(0, t, IK.data() + t * c.index_dim);
    }
  }
  auto Q = randn(rng, size_t(c.rows * c.q_heads * c.head_dim));
  auto IQ = randn(rng, size_t(c.rows * c.kv_heads * c.index_dim));
  for (float& x : IQ) x = std::round(x * 2.0f) / 2.0f;

  AttentionRun run;
  run.q = Q.data();
  run.iq = IQ.data();
  run.first_pos = c.context;
  run.rows = c.rows;
  run.q_heads = c.q_heads;
  run.kv_heads = c.kv_heads;
  run.head_dim = c.head_dim;
  run.index_dim = c.index_dim;
  run.topk = c.topk;
  ThreadPool pool(threads);
  BlockSelection sel;
  if (sparse) msa_select_run(pool, cache, 0, run, sel);
  std::vector<float> out(size_t(c.rows * c.q_heads * c.head_dim));
  attention_run(pool, cache, 0, run, sparse ? &sel : nullptr, out.data());

  double worst = 0;
  const int Hg = c.q_heads / c.kv_heads;
  for (int64_t r = 0; r < c.rows; ++r) {
    const int64_t p = c.context + r, L = p / c.block;
    for (int g = 0; g < c.kv_heads; ++g) {
      std::vector<int32_t> blocks;
      if (!sparse || L + 1 <= c.topk) {
        for (int32_t b = 0; b <= L; ++b) blocks.push_back(b);
      } else {
        std::vector<std::pair<double, int32_t>> bs;
        for (int32_t b = 0; b < L; ++b) {
          double best = -1e300;
          for (int64_t t = int64_t(b) * c.block; t < int64_t(b + 1) * c.block; ++t) {
            double s = 0;
            for (int d = 0; d < c.index_dim; ++d)
              s += double(IQ[size_t((r * c.kv_heads + g) * c.index_dim + d)]) * IK[size_t(t * c.index_dim + d)];
            best = std::max(best, s);
          }
          bs.push_back({-best, b});
        }
        std::stable_sort(bs.begin(), bs.end(), [](auto& a, auto& b) { return a.first < b.first; });
        for (int i = 0; i < c.topk - 1; ++i) blocks.push_back(bs[size_t(i)].second);
        std::sort(blocks.begin(), blocks.end());
        blocks.push_back(int32_t(L));
        std::vector<int32_t> got(sel.blocks.begin() + (r * c.kv_heads + g) * c.topk,
                                 sel.blocks.begin() + (r * c.kv_heads + g) * c.topk + sel.count[size_t(r * c.kv_heads + g)]);
        EXPECT_EQ(got, blocks) << "row " << r << " group " << g;
      }
      for (int hh = 0; hh < Hg; ++hh) {
        const int h = g * Hg + hh;
        std::vector<int64_t> keys;
        for (int32_t b : blocks)
          for (int64_t t = int64_t(b) * c.block; t < int64_t(b + 1) * c.block && t <= p; ++t) keys.push_back(t);
        std::vector<double> w;
        double mx = -1e300, sum = 0;
        for (int64_t t : keys) {
          double s = 0;
          for (int d = 0; d < c.head_dim; ++d)
            s += double(Q[size_t((r * c.q_heads + h) * c.head_dim + d)]) * K[size_t((t * c.kv_heads + g) * c.head_dim + d)];
          w.push_back(s / std::sqrt(double(c.head_dim)));
          mx = std::max(mx, w.back());
        }
        for (double& x : w) sum += x = std::exp(x - mx);
        for (int d = 0; d < c.head_dim; ++d) {
          double ref = 0;
          for (size_t j = 0; j < keys.size(); ++j) ref += w[j] / sum * V[size_t((keys[j] * c.kv_heads + g) * c.head_dim + d)];
          worst = std::max(worst, std::fabs(ref - out[size_t((r * c.q_heads + h) * c.head_dim + d)]));
        }
      }
    }
  }
  return worst;
}

// M3's attention geometry (16 query heads per group, head_dim 128, index dim 128, top-16 of
// 128-token blocks) with `kv_heads` groups, at a context past 16 blocks.
NaiveCase m3_case(int kv_heads, int64_t context, int64_t rows, DType cache) {
  NaiveCase c;
  c.block = 128;
  c.topk = 16;
  c.q_heads = 16 * kv_heads;
  c.kv_heads = kv_heads;
  c.head_dim = 128;
  c.index_dim = 128;
  c.context = context;
  c.rows = rows;
  c.cache = cache;
  return c;
}

}  // namespace

TEST(MsaAttention, MatchesNaiveSpecAcrossShapes) {
  // Lengths not a multiple of the block, fewer than top-k blocks, exactly k and k+1 blocks,
  // chunks that start inside a block, one and several threads, head_dim not a multiple of 16.
  // 200 rows over 31 blocks: the index scores are cut into slices of rows as well as groups of
  // blocks (msa_select_run), with slices that start before, inside and after a block's first row.
  struct Shape { int64_t context, rows; };
  const Shape shapes[] = {{0, 1}, {0, 37}, {0, 64}, {48, 16}, {63, 2}, {64, 1}, {65, 30}, {150, 57}, {300, 1}, {300, 200}};
  uint32_t seed = 100;
  for (int threads : {1, 3})
    for (const Shape& s : shapes)
      for (bool sparse : {true, false}) {
        NaiveCase c;
        c.context = s.context;
        c.rows = s.rows;
        EXPECT_LT(run_case(c, sparse, threads, seed++), 2e-5) << "context " << s.context << " rows " << s.rows;
      }
  const NaiveCase m3shape = m3_case(2, 16 * 128 + 50, 3, DType::F32);  // 17+ blocks
  EXPECT_LT(run_case(m3shape, true, 2, 7), 2e-5);
  NaiveCase odd;
  odd.head_dim = 24;
  odd.index_dim = 20;
  odd.block = 10;
  odd.context = 95;
  odd.rows = 11;
  EXPECT_LT(run_case(odd, true, 2, 8), 2e-5);
}

TEST(MsaAttention, Bf16CacheMatchesNaiveSpecOnRoundedValues) {
  struct Shape { int64_t context, rows; };
  const Shape shapes[] = {{0, 37}, {63, 2}, {65, 30}, {150, 57}, {300, 1}};
  uint32_t seed = 300;
  for (const Shape& s : shapes)
    for (bool sparse : {true, false}) {
      NaiveCase c;
      c.cache = DType::BF16;
      c.context = s.context;
      c.rows = s.rows;
      EXPECT_LT(run_case(c, sparse, 2, seed++), 2e-5) << "context " << s.context << " rows " << s.rows;
    }
  const NaiveCase m3shape = m3_case(2, 16 * 128 + 50, 3, DType::BF16);
  EXPECT_LT(run_case(m3shape, true, 2, 9), 2e-5);
  NaiveCase odd;  // head_dim not a multiple of 16: the plain kernels widen bf16 too
  odd.cache = DType::BF16;
  odd.head_dim = 24;
  odd.index_dim = 20;
  odd.block = 10;
  odd.context = 95;
  odd.rows = 11;
  EXPECT_LT(run_case(odd, true, 2, 10), 2e-5);
}

// An fp8 cache: selection and attention on its E4M3 values with per-vector scales match the naive
// model on the values the cache holds (read back dequantized), at the tiny, M3 and odd shapes.
TEST(MsaAttention, Fp8CacheMatchesNaiveSpecOnTheStoredValues) {
  struct Shape { int64_t context, rows; };
  const Shape shapes[] = {{0, 37}, {63, 2}, {65, 30}, {150, 57}, {300, 1}};
  uint32_t seed = 400;
  for (const Shape& s : shapes)
    for (bool sparse : {true, false}) {
      NaiveCase c;
      c.cache = DType::F8_E4M3;
      c.context = s.context;
      c.rows = s.rows;
      EXPECT_LT(run_case(c, sparse, 2, seed++), 2e-5) << "context " << s.context << " rows " << s.rows;
    }
  EXPECT_LT(run_case(m3_case(2, 16 * 128 + 50, 3, DType::F8_E4M3), true, 2, 11), 2e-5);
  NaiveCase odd;  // head_dim not a multiple of 16, a block of 10 keys
  odd.cache = DType::F8_E4M3;
  odd.head_dim = 24;
  odd.index_dim = 20;
  odd.block = 10;
  odd.context = 95;
  odd.rows = 11;
  EXPECT_LT(run_case(odd, true, 2, 12), 2e-5);
}

TEST(MsaAttention, DecodeSplitAcrossMoreThreadsThanGroupsMatchesNaiveSpec) {
  // One row with more threads than KV groups: each group's segments (8 MSA entries, 64 dense
  // blocks) run in parallel and are folded by log-sum-exp. A last segment of one entry, fewer
  // segments than threads, one segment only (dense over 2 blocks on 8 threads), a partial local block.
  uint32_t seed = 500;
  for (int threads : {2, 4, 8})
    for (int kv_heads : {1, 2})
      for (int64_t context : {5, 20, 64, 150, 301})
        for (bool sparse : {true, false}) {
          NaiveCase c;
          c.kv_heads = kv_heads;
          c.context = context;
          c.rows = 1;
          EXPECT_LT(run_case(c, sparse, threads, seed++), 2e-5)
              << "threads " << threads << " groups " << kv_heads << " context " << context << " sparse " << sparse;
        }
  const NaiveCase m3shape = m3_case(4, 20 * 128 + 77, 1, DType::BF16);  // M3's 4 groups on 8 threads
  EXPECT_LT(run_case(m3shape, true, 8, 11), 2e-5);
  EXPECT_LT(run_case(m3shape, false, 8, 12), 2e-5);
}

TEST(MsaAttention, DecodeGivesThePrefillBitsOnAnyThreadCount) {
  // A row's attention is a fold of fixed segments of its block list, so a decode step split across
  // threads, a decode step on one thread and the same row inside a prefill chunk agree bit for bit
  // (what keeps prefix-cache reuse exact). Dense rows span several 64-block segments here.
  for (bool sparse : {true, false})
    for (DType dtype : {DType::F32, DType::BF16}) {
      std::mt19937 rng(sparse ? 21 : 22);
      const int block = 8, topk = 16, G = 2, Hg = 4, hd = 32, id = 16;
      const int64_t T = 700;  // 88 blocks: dense rows fold two segments, MSA rows two
      KvCacheShape shape;
      shape.num_layers = 1;
      shape.block_size = block;
      shape.kv_heads = G;
      shape.head_dim = hd;
      shape.index_dim = id;
      shape.layer_has_index = {true};
      shape.dtype = dtype;
      KvCache cache(shape);
      cache.ensure_capacity(T);
      for (int64_t t = 0; t < T; ++t) {
        for (int g = 0; g < G; ++g) {
          const auto k = randn(rng, hd), v = randn(rng, hd);
          cache.write_kv(0, t, g, k.data(), v.data());
        }
        cache.write_index_k(0, t, randn(rng, id).data());
      }
      cache.set_length(T);
      const int64_t rows = 40, first = T - rows;
      const auto Q = randn(rng, size_t(rows * G * Hg * hd)), IQ = randn(rng, size_t(rows * G * id));
      AttentionRun run;
      run.q = Q.data();
      run.iq = IQ.data();
      run.first_pos = first;
      run.rows = rows;
      run.q_heads = G * Hg;
      run.kv_heads = G;
      run.head_dim = hd;
      run.index_dim = id;
      run.topk = topk;
      std::vector<float> chunk_out(Q.size());
      ThreadPool two(2);
      BlockSelection sel;
      if (sparse) msa_select_run(two, cache, 0, run, sel);
      attention_run(two, cache, 0, run, sparse ? &sel : nullptr, chunk_out.data());
      for (int threads : {1, 2, 3, 8}) {
        ThreadPool pool(threads);
        for (int64_t r : {int64_t(0), rows / 2, rows - 1}) {
          AttentionRun one = run;
          one.q = Q.data() + r * G * Hg * hd;
          one.iq = IQ.data() + r * G * id;
          one.first_pos = first + r;
          one.rows = 1;
          BlockSelection sel1;
          if (sparse) msa_select_run(pool, cache, 0, one, sel1);
          std::vector<float> row_out(size_t(G * Hg * hd));
          attention_run(pool, cache, 0, one, sparse ? &sel1 : nullptr, row_out.data());
          EXPECT_EQ(std::memcmp(row_out.data(), chunk_out.data() + r * G * Hg * hd, row_out.size() * sizeof(float)), 0)
              << (sparse ? "MSA" : "dense") << " " << dtype_name(dtype) << " row " << r << " threads " << threads;
        }
      }
    }
}
