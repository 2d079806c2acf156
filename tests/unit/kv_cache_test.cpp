// The KV cache: bf16 values are rounded to nearest even when written, read back widened, pages are
// half the bytes of an fp32 cache; fp8 values are E4M3 times a power-of-two scale per vector; a prefix cache shares its source's whole pages, keeps every
// bit, and a write never reaches a page another cache holds (copy on write).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <thread>
#include <unordered_map>

#include "m3/dtype.h"
#include "m3/error.h"
#include "format/mxfp8_quantize.h"
#include "memory/kv_cache.h"
#include "memory/page_arena.h"

using namespace m3;

namespace {

KvCacheShape shape_of(DType t) {
  KvCacheShape s;
  s.num_layers = 2;
  s.block_size = 4;
  s.kv_heads = 2;
  s.head_dim = 3;
  s.index_dim = 5;
  s.layer_has_index = {false, true};
  s.dtype = t;
  return s;
}

float from_bits(uint32_t b) {
  float f;
  std::memcpy(&f, &b, 4);
  return f;
}

// Fills positions [0, n) of every layer with normal values; returns them as written.
void fill(KvCache& c, int64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d;
  const KvCacheShape& s = c.shape();
  c.ensure_capacity(n);
  std::vector<float> k(size_t(s.head_dim)), v(size_t(s.head_dim)), ik(size_t(s.index_dim));
  for (int l = 0; l < s.num_layers; ++l)
    for (int64_t p = 0; p < n; ++p) {
      for (int h = 0; h < s.kv_heads; ++h) {
        for (auto& x : k) x = d(rng);
        for (auto& x : v) x = d(rng);
        c.write_kv(l, p, h, k.data(), v.data());
      }
      for (auto& x : ik) x = d(rng);
      if (s.layer_has_index[size_t(l)]) c.write_index_k(l, p, ik.data());
    }
  c.set_length(n);
}

}  // namespace

TEST(KvCacheBf16, ParsesTheCacheTypeNames) {
  EXPECT_EQ(parse_cache_type("f32"), DType::F32);
  EXPECT_EQ(parse_cache_type("bf16"), DType::BF16);
  EXPECT_FALSE(parse_cache_type("f16").has_value());
  EXPECT_STREQ(cache_type_name(DType::BF16), "bf16");
  KvCacheShape s = shape_of(DType::F16);
  EXPECT_THROW(KvCache{s}, Error);
}

TEST(KvCacheBf16, WritesRoundToNearestEvenInTheSameLayout) {
  KvCache c(shape_of(DType::BF16));
  c.ensure_capacity(9);
  // 1 + 2^-8 is halfway between bf16 1 and 1 + 2^-7: ties to even (1). 1 + 3·2^-8 is halfway
  // between 1 + 2^-7 and 1 + 2^-6: ties to even (1 + 2^-6). Just above a half rounds up.
  const float k[3] = {1.0f + 0x1p-8f, 1.0f + 3 * 0x1p-8f, from_bits(0x3f808001u)};
  const float v[3] = {-2.0f, 1e-3f, 65504.0f};
  c.write_kv(1, 6, 1, k, v);  // block 1, slot 2
  const uint16_t* kt = c.k_block_t(1, 1, 1).as<uint16_t>();
  EXPECT_EQ(kt[0 * 4 + 2], f32_to_bf16(1.0f));  // K transposed: [dim][slot]
  EXPECT_EQ(bf16_to_f32(kt[1 * 4 + 2]), 1.0f + 0x1p-6f);
  EXPECT_EQ(kt[2 * 4 + 2], 0x3f81u);
  const uint16_t* vb = c.v_block(1, 1, 1).as<uint16_t>();
  EXPECT_EQ(vb[2 * 3 + 0], f32_to_bf16(-2.0f));  // V natural: [slot][dim]
  EXPECT_EQ(vb[2 * 3 + 1], f32_to_bf16(1e-3f));
  float rk[3], rv[3];
  c.read_kv(1, 6, 1, rk, rv);
  for (int d = 0; d < 3; ++d) {
    EXPECT_EQ(rk[d], round_to_bf16(k[d]));
    EXPECT_EQ(rv[d], round_to_bf16(v[d]));
  }
  const float ik[5] = {0, 0, 0, 0, 3.14159f};
  c.write_index_k(1, 5, ik);  // block 1, slot 1
  EXPECT_EQ(bf16_to_f32(c.index_k_block_t(1, 1).as<uint16_t>()[4 * 4 + 1]), round_to_bf16(3.14159f));
  // A page view carries its element type: a bf16 page is not read as floats.
  EXPECT_EQ(c.k_block_t(1, 1, 1).dtype, DType::BF16);
  EXPECT_THROW(c.k_block_t(1, 1, 1).as<float>(), Error);
  EXPECT_THROW(c.index_k_block_t(1, 1).as<float>(), Error);
}

TEST(KvCacheBf16, Fp32CacheStoresExactlyAndBf16HalvesTheBytes) {
  KvCache f(shape_of(DType::F32)), b(shape_of(DType::BF16));
  fill(f, 9, 3);
  fill(b, 9, 3);  // same values
  EXPECT_EQ(f.num_pages(), b.num_pages());
  EXPECT_EQ(f.bytes(), 2 * b.bytes());
  float fk[3], fv[3], bk[3], bv[3], fi[5], bi[5];
  for (int64_t p = 0; p < 9; ++p)
    for (int h = 0; h < 2; ++h) {
      f.read_kv(0, p, h, fk, fv);
      b.read_kv(0, p, h, bk, bv);
      for (int d = 0; d < 3; ++d) {
        EXPECT_EQ(bk[d], round_to_bf16(fk[d]));
        EXPECT_EQ(bv[d], round_to_bf16(fv[d]));
        EXPECT_EQ(fk[d], f.k_block_t(0, p / 4, h).as<float>()[d * 4 + p % 4]);
      }
      f.read_index_k(1, p, fi);
      b.read_index_k(1, p, bi);
      for (int d = 0; d < 5; ++d) EXPECT_EQ(bi[d], round_to_bf16(fi[d]));
    }
  EXPECT_THROW(f.v_block(0, 0, 0).as<uint16_t>(), Error);
}

// The fp8 cache: each vector is E4M3 times its own power-of-two scale, the smallest that keeps the
// vector within 448; reading back gives those values; pages are half a bf16 cache's plus a byte
// of scale per vector.
TEST(KvCacheFp8, StoresE4m3TimesAPowerOfTwoScalePerVector) {
  ASSERT_EQ(parse_cache_type("fp8"), DType::F8_E4M3);
  EXPECT_STREQ(cache_type_name(DType::F8_E4M3), "fp8");
  KvCacheShape shape = shape_of(DType::F8_E4M3);
  shape.head_dim = 32;
  KvCache c(shape);
  c.ensure_capacity(4);
  std::mt19937 rng(5);
  std::normal_distribution<float> d;
  for (float amp : {1.0f, 1000.0f, 1e-5f, 0.0f}) {
    std::vector<float> k(32), v(32), rk(32), rv(32);
    for (auto& x : k) x = amp * d(rng);
    for (auto& x : v) x = amp * d(rng);
    k[3] = 0.0f;
    c.write_kv(0, 1, 1, k.data(), v.data());
    c.read_kv(0, 1, 1, rk.data(), rv.data());
    for (const auto& [x, r] : {std::pair{&k, &rk}, std::pair{&v, &rv}}) {
      const uint8_t s = fp8_vector_scale(x->data(), 32);
      float amax = 0;
      for (float e : *x) amax = std::max(amax, std::fabs(e));
      if (amax > 0) {  // the smallest scale that fits
        EXPECT_LE(amax / ue8m0_to_f32(s), 448.0f);
        EXPECT_GT(amax / ue8m0_to_f32(uint8_t(s - 1)), 448.0f);
      } else {
        EXPECT_EQ(s, 127);
      }
      for (int i = 0; i < 32; ++i) {
        const float want = f8e4m3_to_f32(f32_to_f8e4m3((*x)[size_t(i)] / ue8m0_to_f32(s))) * ue8m0_to_f32(s);
        EXPECT_EQ((*r)[size_t(i)], want) << "amp " << amp << " i " << i;
        EXPECT_LE(std::fabs((*r)[size_t(i)] - (*x)[size_t(i)]), std::fabs((*x)[size_t(i)]) / 16 + amax / 448 / 512)
            << "amp " << amp;
      }
    }
    EXPECT_EQ(rk[3], 0.0f);
  }
  // The kernels' view: E4M3 codes plus the key's scale in the page.
  std::vector<float> k(32, 0.5f), v(32, 2.0f);
  c.write_kv(1, 2, 0, k.data(), v.data());
  const CachePageView kt = c.k_block_t(1, 0, 0), vv = c.v_block(1, 0, 0);
  EXPECT_EQ(f8e4m3_to_f32(kt.as<uint8_t>()[5 * 4 + 2]) * ue8m0_to_f32(kt.scales[2]), 0.5f);
  EXPECT_EQ(f8e4m3_to_f32(vv.as<uint8_t>()[2 * 32 + 7]) * ue8m0_to_f32(vv.scales[2]), 2.0f);
  EXPECT_THROW(kt.as<uint16_t>(), Error);
  KvCache b(shape_of(DType::BF16)), f8(shape_of(DType::F8_E4M3));
  fill(b, 9, 3);
  fill(f8, 9, 3);
  // fp8 stores a byte per element where bf16 stores two, plus a scale byte per vector: 6 KV pages
  // (2 layers x 3 blocks) of K and V for 2 heads x 4 slots, and 3 index pages of 4 slots.
  const uint64_t vectors = 6 * (2 * 2 * 4) + 3 * 4;
  EXPECT_EQ(f8.bytes() * 2, b.bytes() + 2 * vectors);
  // A copied prefix keeps the codes and the scales.
  auto p = KvCache::prefix_of(f8, 6);
  float a[3], bb[3], a2[3], b2[3];
  for (int64_t pos = 0; pos < 6; ++pos) {
    f8.read_kv(0, pos, 1, a, bb);
    p->read_kv(0, pos, 1, a2, b2);
    EXPECT_EQ(0, std::memcmp(a, a2, sizeof a));
    EXPECT_EQ(0, std::memcmp(bb, b2, sizeof bb));
  }
}

TEST(KvCacheBf16, CopiedPrefixKeepsEveryBit) {
  for (DType t : {DType::F32, DType::BF16}) {
    KvCache src(shape_of(t));
    fill(src, 11, 5);
    auto dst = KvCache::prefix_of(src, 6);
    ASSERT_EQ(dst->dtype(), t);
    ASSERT_EQ(dst->length(), 6);
    float a[5], b[5], c[5], d[5];
    for (int l = 0; l < 2; ++l)
      for (int64_t p = 0; p < 6; ++p) {
        for (int h = 0; h < 2; ++h) {
          src.read_kv(l, p, h, a, b);
          dst->read_kv(l, p, h, c, d);
          EXPECT_EQ(std::memcmp(a, c, 3 * sizeof(float)), 0);
          EXPECT_EQ(std::memcmp(b, d, 3 * sizeof(float)), 0);
        }
        if (l == 1) {
          src.read_index_k(l, p, a);
          dst->read_index_k(l, p, c);
          EXPECT_EQ(std::memcmp(a, c, 5 * sizeof(float)), 0);
        }
      }
  }
}

TEST(KvCacheSharing, PrefixSharesWholeBlocksAndCopiesThePartialOne) {
  KvCache src(shape_of(DType::F32));
  fill(src, 11, 7);  // blocks 0, 1 whole, block 2 partial (3 of 4)
  auto half = KvCache::prefix_of(src, 9);  // blocks 0, 1 shared, block 2 (1 token) copied
  // 2 layers of KV pages + 1 index layer, 2 whole blocks each.
  EXPECT_EQ(half->shared_pages(), 3 * 2);
  EXPECT_EQ(src.shared_pages(), 3 * 2);
  EXPECT_EQ(half->k_block_t(0, 1, 0).data, src.k_block_t(0, 1, 0).data);
  EXPECT_NE(half->k_block_t(0, 2, 0).data, src.k_block_t(0, 2, 0).data);
  std::unordered_map<const void*, size_t> pages;
  src.collect_pages(pages);
  half->collect_pages(pages);
  uint64_t together = 0;
  for (const auto& [p, n] : pages) together += n;
  EXPECT_EQ(together, src.bytes() + half->bytes() / 3);  // only the copied partial block is extra
  auto whole = KvCache::prefix_of(src, 8);  // a block boundary: nothing copied
  EXPECT_EQ(whole->num_pages(), 3 * 2);
  EXPECT_THROW(KvCache::prefix_of(src, 12), Error);
}

TEST(KvCacheSharing, WritingAfterTruncationCopiesTheSharedPageFirst) {
  KvCache src(shape_of(DType::F32));
  fill(src, 8, 9);
  auto other = KvCache::prefix_of(src, 8);  // shares both blocks
  float k0[3], v0[3];
  src.read_kv(0, 5, 1, k0, v0);
  // `other` goes back into block 1 and writes position 5 there: src must not see it.
  other->truncate(5);
  const float k[3] = {100, 200, 300}, v[3] = {-1, -2, -3};
  EXPECT_THROW(other->write_kv(0, 5, 1, k, v), Error);  // without prepare_write: refused, nothing written
  other->prepare_write(5, 6);
  other->write_kv(0, 5, 1, k, v);
  float k1[3], v1[3];
  src.read_kv(0, 5, 1, k1, v1);
  EXPECT_EQ(std::memcmp(k0, k1, sizeof k0), 0);
  EXPECT_EQ(std::memcmp(v0, v1, sizeof v0), 0);
  other->read_kv(0, 5, 1, k1, v1);
  EXPECT_EQ(k1[2], 300.0f);
  EXPECT_EQ(other->k_block_t(0, 0, 0).data, src.k_block_t(0, 0, 0).data);  // block 0 still shared
  EXPECT_NE(other->k_block_t(0, 1, 0).data, src.k_block_t(0, 1, 0).data);
}

// Cache pages, small (carved from huge-page chunks) and large (from the allocator): zeroed, 64-byte
// aligned, never overlapping, and zeroed again when a freed page is handed out anew, also when two
// threads take and drop pages at once.
TEST(CachePages, ZeroedAlignedDistinctAndZeroedOnReuse) {
  for (size_t bytes : {size_t(1000), size_t(4096), kMaxArenaPageBytes, kMaxArenaPageBytes + 1}) {
    std::vector<std::shared_ptr<std::byte[]>> pages;
    for (int i = 0; i < 40; ++i) {
      pages.push_back(allocate_cache_page(bytes));
      const std::byte* p = pages.back().get();
      ASSERT_EQ(reinterpret_cast<uintptr_t>(p) % 64, 0u) << bytes;
      for (size_t b = 0; b < bytes; ++b) ASSERT_EQ(p[b], std::byte{0}) << bytes << " byte " << b;
      std::memset(pages.back().get(), i + 1, bytes);
    }
    for (int i = 0; i < 40; ++i)  // no page wrote into another
      for (size_t b = 0; b < bytes; b += 97) ASSERT_EQ(pages[size_t(i)][b], std::byte(i + 1)) << bytes;
    pages.clear();  // back to the free lists, dirty
    for (int i = 0; i < 40; ++i) {
      auto p = allocate_cache_page(bytes);
      for (size_t b = 0; b < bytes; ++b) ASSERT_EQ(p[b], std::byte{0}) << bytes << " reused, byte " << b;
    }
  }
  auto churn = [](int seed, bool* ok) {
    std::vector<std::shared_ptr<std::byte[]>> held;
    for (int i = 0; i < 2000; ++i) {
      auto p = allocate_cache_page(4096);
      for (size_t b = 0; b < 4096; b += 61) *ok = *ok && p[b] == std::byte{0};
      std::memset(p.get(), seed, 4096);
      held.push_back(std::move(p));
      if (held.size() > 50) held.erase(held.begin(), held.begin() + 25);
    }
  };
  bool ok1 = true, ok2 = true;
  std::thread t1(churn, 1, &ok1), t2(churn, 2, &ok2);
  t1.join();
  t2.join();
  EXPECT_TRUE(ok1 && ok2) << "a page was handed out dirty while two threads took and dropped pages";
}
