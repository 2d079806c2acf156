#pragma once
// Attention in training (spec §3.4, §4): MSA block selection, causal GQA attention over the
// selected blocks (or dense), its backward, and the indexer's KL objective (spec §4.7), for one
// sequence at positions 0..T-1.
//
// No O(T²) buffer: the forward saves each query's log-sum-exp and the backward recomputes the
// probabilities from it, as flash attention's backward does. Selection is a discrete decision and
// is not differentiated; the KL's teacher (the main attention's probabilities) is detached.
#include <cstdint>
#include <vector>

#include "base/thread_pool.h"

namespace m3::train {

struct AttentionShape {
  int64_t tokens = 0;  // T
  int q_heads = 0, kv_heads = 0, head_dim = 0;
  int index_dim = 0;   // Di (MSA layers)
  int block = 0, topk = 0;
};

// The blocks each (KV group, token) attends to: the local block last, as in the spec's kernel
// contract. Rows with at most topk visible blocks list all of them (dense below the budget).
struct BlockChoice {
  int64_t tokens = 0;
  int groups = 0, topk = 0, block = 0;
  std::vector<int32_t> blocks;  // (groups, tokens, topk); entries past count are -1
  std::vector<int32_t> count;   // (groups, tokens)

  const int32_t* of(int g, int64_t p) const { return blocks.data() + (g * tokens + p) * topk; }
  int count_of(int g, int64_t p) const { return count[size_t(g * tokens + p)]; }
};

// Spec §4.2-§4.4: token scores iq_g(p)·ik(t)/√Di, token-causal block max, the topk-1 best earlier
// blocks (ties: smaller id) plus the local one. iq (T, G, Di), ik (T, Di)
template <typename T>
BlockChoice msa_select(ThreadPool& pool, const AttentionShape& s, const T* iq, const T* ik);

// Causal GQA attention; `choice` (nullptr: dense) restricts group g's queries to its blocks.
// q (T, Hq, D), k/v (T, Hkv, D) -> o (T, Hq, D) (nullptr: only the log-sum-exp), lse (T, Hq)
template <typename T>
void attention_forward(ThreadPool& pool, const AttentionShape& s, const T* q, const T* k, const T* v,
                       const BlockChoice* choice, T* o, T* lse);

// do (T, Hq, D) -> dq (T, Hq, D), dk/dv (T, Hkv, D), all written.
template <typename T>
void attention_backward(ThreadPool& pool, const AttentionShape& s, const T* q, const T* k, const T* v,
                        const BlockChoice* choice, const T* o, const T* lse, const T* dout, T* dq, T* dk, T* dv);

struct IndexerKl {
  double kl_sum = 0.0;  // Σ_p Σ_g KL(P̄_g(p) ‖ Q_g(p)) over the support
};

// The indexer objective on the support each query attends to (its selected blocks, or its whole
// causal history when `choice` is nullptr: the dense warm-up). Teacher P̄_g = mean over group g's
// query heads of their attention probabilities (from q, k and the attention's lse; detached);
// student Q_g = softmax(iq_g·ik/√Di) over the same keys. Gradients of coef · Σ KL:
// diq (T, G, Di), dik (T, Di), both written.
template <typename T>
IndexerKl indexer_kl(ThreadPool& pool, const AttentionShape& s, const T* q, const T* k, const T* lse, const T* iq,
                     const T* ik, const BlockChoice* choice, double coef, T* diq, T* dik);

}  // namespace m3::train
