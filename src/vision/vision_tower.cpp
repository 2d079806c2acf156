#include "vision/vision_tower.h"

#include <algorithm>
#include <cmath>

#include "m3/error.h"
#include "kernels/elementwise.h"
#include "kernels/matmul.h"
#include "vision/vision_attention.h"

namespace m3::vision {

int rope_axis_dim(int head_dim) { return 2 * ((head_dim / 3) / 2); }

void check_grid(const GridThw& grid, int merge_size) {
  M3_CHECK(grid.t > 0 && grid.h > 0 && grid.w > 0, "vision: grid_thw [", grid.t, ", ", grid.h, ", ", grid.w,
           "] must be positive");
  M3_CHECK(grid.h % merge_size == 0 && grid.w % merge_size == 0, "vision: grid_thw [", grid.t, ", ", grid.h, ", ",
           grid.w, "]: h and w must be multiples of the merge size ", merge_size);
}

std::vector<Segment> attention_segments(const GridThw& grid, int segment_max_frames) {
  M3_CHECK(segment_max_frames > 0, "vision: vision_segment_max_frames must be positive");
  const int64_t per_group = grid.h * grid.w;
  std::vector<Segment> s;
  for (int64_t t0 = 0; t0 < grid.t; t0 += segment_max_frames)
    s.push_back({t0 * per_group, std::min<int64_t>(grid.t, t0 + segment_max_frames) * per_group});
  return s;
}

std::vector<PatchPosition> patch_positions(const GridThw& grid, int merge_size, int segment_max_frames) {
  check_grid(grid, merge_size);
  const int64_t m = merge_size, bh_n = grid.h / m, bw_n = grid.w / m;
  std::vector<PatchPosition> pos;
  pos.reserve(size_t(grid.patches()));
  for (int64_t t = 0; t < grid.t; ++t)
    for (int64_t bh = 0; bh < bh_n; ++bh)
      for (int64_t bw = 0; bw < bw_n; ++bw)
        for (int64_t sh = 0; sh < m; ++sh)
          for (int64_t sw = 0; sw < m; ++sw)
            pos.push_back({int32_t(t % segment_max_frames), int32_t(bh * m + sh), int32_t(bw * m + sw)});
  return pos;
}

Rope3d::Rope3d(double theta, int head_dim, VisionRopeVariant variant)
    : theta_(theta), head_dim_(head_dim), axis_(rope_axis_dim(head_dim)) {
  M3_CHECK(axis_ >= 2, "vision: head_dim ", head_dim, " is too small for 3D RoPE (needs at least 6)");
  auto add = [&](int a, int b, int axis, double f) {
    first_.push_back(a);
    second_.push_back(b);
    axis_of_.push_back(axis);
    freq_.push_back(f);
  };
  if (variant == VisionRopeVariant::NeoxPadded) {
    const int per = axis_ / 2, half = 3 * per;
    for (int ax = 0; ax < 3; ++ax)
      for (int k = 0; k < per; ++k) {
        const int j = ax * per + k;
        add(j, j + half, ax, std::pow(theta_, -2.0 * k / double(axis_)));
      }
  } else {
    const int dims[3] = {axis_, axis_, head_dim - 2 * axis_};
    for (int ax = 0, base = 0; ax < 3; base += dims[ax], ++ax)
      for (int k = 0; k < dims[ax] / 2; ++k)
        add(base + 2 * k, base + 2 * k + 1, ax, std::pow(theta_, -2.0 * k / double(dims[ax])));
  }
}

std::vector<double> Rope3d::angles(const PatchPosition& p) const {
  const double coord[3] = {double(p.t), double(p.h), double(p.w)};
  std::vector<double> a(freq_.size());
  for (size_t j = 0; j < a.size(); ++j) a[j] = coord[axis_of_[j]] * freq_[j];
  return a;
}

void Rope3d::build(const std::vector<PatchPosition>& positions) {
  const size_t n = freq_.size();
  cos_.resize(positions.size() * n);
  sin_.resize(positions.size() * n);
  for (size_t i = 0; i < positions.size(); ++i) {
    const std::vector<double> a = angles(positions[i]);
    for (size_t j = 0; j < n; ++j) {
      cos_[i * n + j] = float(std::cos(a[j]));
      sin_[i * n + j] = float(std::sin(a[j]));
    }
  }
}

void Rope3d::apply(float* x, int64_t i, int heads) const {
  const int64_t n = int64_t(freq_.size());
  const float* c = cos_.data() + i * n;
  const float* s = sin_.data() + i * n;
  for (int h = 0; h < heads; ++h) {
    float* v = x + int64_t(h) * head_dim_;
    for (int64_t j = 0; j < n; ++j) {
      float& lo = v[first_[size_t(j)]];
      float& hi = v[second_[size_t(j)]];
      const float a = lo, b = hi;
      lo = a * c[j] - b * s[j];
      hi = b * c[j] + a * s[j];
    }
  }
}

float gelu_erf(float x) { return 0.5f * x * (1.0f + std::erf(x * float(M_SQRT1_2))); }

void layer_norm(const float* x, const LayerNormWeights& w, int64_t rows, int64_t n, double eps, float* out) {
  elementwise_kernels().layernorm(x, w.weight.data(), w.bias.data(), rows, n, eps, out);
}

VisionTower::VisionTower(const ModelConfig& cfg, const TensorStore& store, ThreadPool& pool,
                         VisionRopeVariant rope_variant)
    : rope_variant_(rope_variant), pool_(pool) {
  M3_CHECK(cfg.vision.has_value(), cfg.source, ": this checkpoint has no vision tower (config.json has no vision_config)");
  vcfg_ = *cfg.vision;
  out_dim_ = cfg.projector_hidden_size;
  w_ = bind_vision_weights(store, cfg);
}

int64_t VisionTower::merged_tokens(const GridThw& grid) const {
  const int64_t m = vcfg_.spatial_merge_size;
  return grid.patches() / (m * m);
}

void VisionTower::linear(const Linear& l, const float* x, int64_t rows, float* y) const {
  matmul(pool_, x, rows, l.w, y);
  const int64_t n = l.w.rows;
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t i = 0; i < n; ++i) y[r * n + i] += l.b[size_t(i)];
}

// Multi-head attention of one block: h (rows, vh) normed input -> out (rows, vh) after out_proj.
void VisionTower::attention(const VisionLayerWeights& lw, const Rope3d& rope, const std::vector<Segment>& segments,
                            const float* h, int64_t rows, float* out) const {
  const int64_t D = vcfg_.hidden_size, heads = vcfg_.num_attention_heads, hd = vcfg_.head_dim();
  std::vector<float> q(size_t(rows * D)), k(size_t(rows * D)), v(size_t(rows * D));
  linear(lw.q, h, rows, q.data());
  linear(lw.k, h, rows, k.data());
  linear(lw.v, h, rows, v.data());
  for (int64_t r = 0; r < rows; ++r) {
    rope.apply(q.data() + r * D, r, int(heads));
    rope.apply(k.data() + r * D, r, int(heads));
  }
  // Full bidirectional attention inside each segment (vision_attention.h: tiled, online softmax).
  std::vector<float> attn(size_t(rows * D));
  vision_attention(pool_, q.data(), k.data(), v.data(), rows, int(heads), int(hd), segments, attn.data());
  linear(lw.out, attn.data(), rows, out);
}

std::vector<float> VisionTower::encode(const float* pixels, int64_t rows, int64_t cols, const GridThw& grid) const {
  const VisionConfig& c = vcfg_;
  check_grid(grid, c.spatial_merge_size);
  M3_CHECK(rows == grid.patches(), "vision: pixel_values has ", rows, " rows but grid_thw [", grid.t, ", ", grid.h,
           ", ", grid.w, "] implies ", grid.patches());
  M3_CHECK(cols == c.patch_input_dim(), "vision: pixel_values rows have ", cols, " values, the patch embedding expects ",
           c.patch_input_dim(), " (channels x temporal_patch_size x patch_size²)");
  const int64_t D = c.hidden_size, I = c.intermediate_size;
  const std::vector<PatchPosition> pos = patch_positions(grid, c.spatial_merge_size, c.vision_segment_max_frames);
  const std::vector<Segment> segments = attention_segments(grid, c.vision_segment_max_frames);
  Rope3d rope(c.rope_theta, c.head_dim(), rope_variant_);
  rope.build(pos);

  // x (rows, D) residual stream; h normed input of a sub-block; y its output; f (rows, I) MLP hidden.
  std::vector<float> x(size_t(rows * D)), h(size_t(rows * D)), y(size_t(rows * D)), f(size_t(rows * I));
  matmul(pool_, pixels, rows, w_.patch_embedding, x.data());  // Conv3d, no bias
  layer_norm(x.data(), w_.pre_layrnorm, rows, D, c.layer_norm_eps, x.data());
  for (const VisionLayerWeights& lw : w_.layers) {
    layer_norm(x.data(), lw.ln1, rows, D, c.layer_norm_eps, h.data());
    attention(lw, rope, segments, h.data(), rows, y.data());
    for (size_t i = 0; i < x.size(); ++i) x[i] += y[i];
    layer_norm(x.data(), lw.ln2, rows, D, c.layer_norm_eps, h.data());
    linear(lw.fc1, h.data(), rows, f.data());
    for (float& z : f) z = gelu_erf(z);
    linear(lw.fc2, f.data(), rows, y.data());
    for (size_t i = 0; i < x.size(); ++i) x[i] += y[i];
  }
  return x;  // no post-LN (spec §5.4.5)
}

std::vector<float> VisionTower::project(const float* features, int64_t rows) const {
  std::vector<float> a(size_t(rows * out_dim_)), z(size_t(rows * out_dim_));
  linear(w_.projector_1, features, rows, a.data());
  for (float& v : a) v = gelu_erf(v);
  linear(w_.projector_2, a.data(), rows, z.data());
  return z;
}

std::vector<float> VisionTower::merge(const float* projected, int64_t rows) const {
  const int64_t m2 = int64_t(vcfg_.spatial_merge_size) * vcfg_.spatial_merge_size;
  M3_CHECK(rows % m2 == 0, "vision: ", rows, " projected tokens are not a multiple of the merge window ", m2);
  const int64_t n = rows / m2;
  // Rows are contiguous (rows, P): n groups of m2 consecutive rows are already the (n, m2·P) concat.
  std::vector<float> a(size_t(n * out_dim_)), z(size_t(n * out_dim_));
  linear(w_.merger_1, projected, n, a.data());
  for (float& v : a) v = gelu_erf(v);
  linear(w_.merger_2, a.data(), n, z.data());
  return z;
}

std::vector<float> VisionTower::forward(const float* pixels, int64_t rows, int64_t cols, const GridThw& grid) const {
  check_grid(grid, vcfg_.spatial_merge_size);
  M3_CHECK(rows == grid.patches(), "vision: pixel_values has ", rows, " rows but grid_thw [", grid.t, ", ", grid.h,
           ", ", grid.w, "] implies ", grid.patches());
  // Segments never see each other (attention stays inside one, everything else is per row or per
  // merge window, and RoPE's t restarts), so a long video runs one segment at a time: the same
  // result, with activations of one segment instead of the whole video in memory.
  const int64_t seg_t = std::max(1, vcfg_.vision_segment_max_frames), per_group = grid.h * grid.w;
  std::vector<float> out;
  out.reserve(size_t(merged_tokens(grid) * out_dim_));
  for (int64_t t0 = 0; t0 < grid.t; t0 += seg_t) {
    const GridThw sub{std::min(seg_t, grid.t - t0), grid.h, grid.w};
    const int64_t r = sub.patches();
    const std::vector<float> feats = encode(pixels + t0 * per_group * cols, r, cols, sub);
    const std::vector<float> z = project(feats.data(), r);
    const std::vector<float> m = merge(z.data(), r);
    out.insert(out.end(), m.begin(), m.end());
  }
  return out;
}

}  // namespace m3::vision
