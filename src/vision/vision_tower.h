#pragma once
// The M3 vision tower (spec §5.4), projector and 2x2 patch merger (§5.5):
//   pixel_values (N, 1176) --patch GEMM--> (N, vh) --pre_layrnorm--> L x pre-LN blocks with 3D RoPE
//   --> (N, vh) --projector linear_1, GELU, linear_2--> (N, P) --concat each merge² consecutive rows-->
//   (N/4, 4P) --merger linear_1, GELU, linear_2--> (N/4, P): the vectors that replace the image
//   placeholder embeddings, in order. All math fp32; weights widened exactly from their stored dtype.
#include <cstdint>
#include <vector>

#include "base/thread_pool.h"
#include "io/model_config.h"
#include "io/safetensors.h"
#include "vision/preprocess.h"
#include "vision/vision_weights.h"
#include "m3/media.h"

namespace m3::vision {

// Dims per axis (t, h, w) of the 3D RoPE: 2·((head_dim / 3) / 2), i.e. 26 for M3's head_dim 80.
// The three axes rotate 3·axis dims; the remaining head_dim − 3·axis dims (2 for M3) pass through.
// The same formula is used for every head_dim (tiny test towers: 16 -> 4 per axis, 4 pass through).
int rope_axis_dim(int head_dim);

// A patch row's RoPE coordinates: t = temporal group within its attention segment (restarts at 0
// in every segment), h/w = patch row/column in the full-resolution grid (2·bh + sh, 2·bw + sw).
struct PatchPosition {
  int32_t t = 0, h = 0, w = 0;
  bool operator==(const PatchPosition&) const = default;
};

// Rows [begin, end) of pixel_values that attend to each other (full, bidirectional): one segment
// per image; a video is cut into chunks of at most segment_max_frames temporal groups.
struct Segment {
  int64_t begin = 0, end = 0;
  bool operator==(const Segment&) const = default;
};

// Throws m3::Error unless the grid is non-empty and h, w are multiples of merge_size.
void check_grid(const GridThw& grid, int merge_size);
// Positions of every row, in pixel_values order (t, bh, bw, sh, sw).
std::vector<PatchPosition> patch_positions(const GridThw& grid, int merge_size, int segment_max_frames);
std::vector<Segment> attention_segments(const GridThw& grid, int segment_max_frames);

// cos/sin of the 3D RoPE angles for a list of positions; angles formed in double, cos/sin
// rounded to fp32.
class Rope3d {
 public:
  Rope3d(double theta, int head_dim, VisionRopeVariant variant = VisionRopeVariant::NeoxPadded);
  int axis_dim() const { return axis_; }
  int pairs() const { return int(first_.size()); }  // rotated pairs per head (NeoX: half = 3·axis/2)
  int half() const { return pairs(); }
  // Pair p rotates dims (first(p), second(p)).
  int first(int p) const { return first_[size_t(p)]; }
  int second(int p) const { return second_[size_t(p)]; }
  void build(const std::vector<PatchPosition>& positions);
  // The angle of every pair for one position, in double (for tests).
  std::vector<double> angles(const PatchPosition& p) const;
  // Rotates `heads` vectors of length head_dim belonging to built row i.
  void apply(float* x, int64_t i, int heads) const;

 private:
  double theta_;
  int head_dim_, axis_;
  std::vector<int> first_, second_, axis_of_;  // per pair: dims, and 0/1/2 = t/h/w
  std::vector<double> freq_;                     // per pair
  std::vector<float> cos_, sin_;                 // (rows, pairs)
};

// Exact GELU: 0.5·x·(1 + erf(x/√2)), in fp32.
float gelu_erf(float x);
// LayerNorm over each row of length n (mean and variance summed in double), out may equal x.
void layer_norm(const float* x, const LayerNormWeights& w, int64_t rows, int64_t n, double eps, float* out);

class VisionTower {
 public:
  // Binds the vision tensors of `store` (which must outlive the tower); throws m3::Error naming the
  // tensor when one is missing or mis-shaped, or when the config has no vision tower.
  VisionTower(const ModelConfig& cfg, const TensorStore& store, ThreadPool& pool,
              VisionRopeVariant rope_variant = VisionRopeVariant::NeoxPadded);

  const VisionConfig& config() const { return vcfg_; }
  int64_t output_dim() const { return out_dim_; }  // projector_hidden_size (= text hidden)
  int merge_size() const { return vcfg_.spatial_merge_size; }
  // Output rows for a grid: t·h·w / merge².
  int64_t merged_tokens(const GridThw& grid) const;

  // pixel_values (rows, cols) of one image or video -> merged embeddings (merged_tokens, output_dim).
  // A video runs one attention segment (≤ vision_segment_max_frames temporal groups) at a time.
  // Throws m3::Error when rows != grid.patches(), cols != patch_input_dim, or the grid is invalid.
  std::vector<float> forward(const float* pixels, int64_t rows, int64_t cols, const GridThw& grid) const;
  std::vector<float> forward(const PixelValues& pv) const {
    return forward(pv.data.data(), pv.rows, pv.cols, pv.grid);
  }

  // The stages, for tests. encode: pixels -> last encoder layer output (rows, vh), no post-LN.
  std::vector<float> encode(const float* pixels, int64_t rows, int64_t cols, const GridThw& grid) const;
  // project: (rows, vh) -> (rows, P). merge: (rows, P) -> (rows/merge², P), each output from the
  // merge² consecutive input rows (one 2x2 window) concatenated in order.
  std::vector<float> project(const float* features, int64_t rows) const;
  std::vector<float> merge(const float* projected, int64_t rows) const;

 private:
  void linear(const Linear& l, const float* x, int64_t rows, float* y) const;
  void attention(const VisionLayerWeights& lw, const Rope3d& rope, const std::vector<Segment>& segments,
                 const float* h, int64_t rows, float* out) const;

  VisionConfig vcfg_;
  VisionRopeVariant rope_variant_;
  int64_t out_dim_ = 0;
  VisionWeights w_;
  ThreadPool& pool_;
};

}  // namespace m3::vision
