#pragma once
// Scratch memory of forward passes, owned by the caller and reused from pass to pass: every buffer
// only grows, so once a pass of a given size has run, passes up to that size allocate none of the
// activations (a later backend or the trainer owns its activations the same way). A workspace is
// used by one forward pass at a time.
#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>

namespace m3 {

class Workspace {
 public:
  // The buffers of one pass. Each is valid until the next get() of the same buffer.
  enum class Buffer : uint8_t {
    Residual,      // x (rows, hidden)
    Normed,        // h (rows, hidden)
    SublayerOut,   // y (rows, hidden)
    Positions,     // (rows) int64
    Q, K, V,       // attention projections
    IndexQ, IndexK,
    AttnOut,       // (rows, q_heads·head_dim)
    BlockScores,   // MSA block scores of a run
    RouterLogits,  // (rows, experts)
    ExpertGate, ExpertUp, ExpertOut,
    MoeSlots,      // (rows·top_k, hidden)
    SharedOut,     // shared expert (rows, hidden)
    FinalRows,     // rows that get logits (m, hidden)
    Logits,        // (m, vocab)
    kCount
  };

  // At least `count` elements of T in `b` (64-byte aligned, contents left from earlier use).
  template <typename T>
  T* get(Buffer b, size_t count) {
    return static_cast<T*>(bytes_for(b, count * sizeof(T)));
  }
  // Bytes held by all buffers.
  size_t bytes() const;

 private:
  void* bytes_for(Buffer b, size_t bytes);

  struct Block {
    std::unique_ptr<std::byte[]> data;
    size_t capacity = 0;
  };
  std::array<Block, size_t(Buffer::kCount)> blocks_;
};

}  // namespace m3
