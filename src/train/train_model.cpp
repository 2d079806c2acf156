#include "train/train_model.h"

#include <algorithm>
#include <cmath>

#include "m3/error.h"
#include "train/moe_train.h"
#include "train/train_ops.h"

namespace m3::train {

namespace {

using R = TensorRole;

// What one layer's backward needs from its forward. (rows = batch · seq)
template <typename T>
struct LayerSaved {
  std::vector<T> x_in, inv1, h1;                    // residual in (rows, H), its norm
  std::vector<T> q_raw, q_inv, q, k_raw, k_inv, k;  // projections before and after norm + RoPE
  std::vector<T> v, o, lse;                         // values, attention output, its log-sum-exp
  std::vector<T> x_mid, inv2, h2;                   // residual after attention, its norm
  FfnSaved<T> mlp;
  MoeSaved<T> moe;
  std::vector<BlockChoice> choice;  // per sequence (MSA layers)
  bool sparse_attention = false;    // main attention over the selected blocks
};

void add_into(std::vector<float>& acc, const std::vector<float>& v) {
  for (size_t i = 0; i < acc.size(); ++i) acc[i] += v[i];
}
void add_into(std::vector<double>& acc, const std::vector<double>& v) {
  for (size_t i = 0; i < acc.size(); ++i) acc[i] += v[i];
}

}  // namespace

template <typename T>
TrainModel<T>::TrainModel(const ModelConfig& cfg, ThreadPool& pool) : cfg_(cfg.text), pool_(pool), table_(cfg.text) {
  M3_CHECK(cfg_.num_attention_heads % cfg_.num_key_value_heads == 0, "training: ", cfg_.num_attention_heads,
           " query heads do not divide into ", cfg_.num_key_value_heads, " KV groups");
  params.assign(size_t(table_.total()), T(0));
}

template <typename T>
StepStats TrainModel<T>::forward_backward(const int32_t* tokens, const int32_t* targets, int64_t batch, int64_t seq,
                                          const StepOptions& opt, Decisions* decisions, bool use_given) {
  const TextConfig& c = cfg_;
  const int64_t H = c.hidden_size, V = c.vocab_size, rows = batch * seq;
  const int Hq = c.num_attention_heads, Hkv = c.num_key_value_heads, D = c.head_dim;
  const int Di = c.sparse.sparse_index_dim, layers = c.num_hidden_layers;
  const double eps = c.rms_norm_eps;
  M3_CHECK(batch > 0 && seq > 0, "training: empty batch");
  M3_CHECK(params.size() == size_t(table_.total()), "training: ", params.size(), " parameters for a table of ",
           table_.total());
  if (opt.backward) M3_CHECK(grads.size() == params.size(), "training: the gradient array is not sized");
  M3_CHECK(!use_given || decisions != nullptr, "training: use_given without decisions");
  for (int64_t i = 0; i < rows; ++i)
    M3_CHECK(tokens[i] >= 0 && tokens[i] < V, "token id ", tokens[i], " at index ", i, " is outside the vocabulary [0, ",
             V, ")");
  for (int64_t i = 0; i < rows; ++i)
    M3_CHECK(targets[i] < V, "target id ", targets[i], " at index ", i, " is outside the vocabulary [0, ", V, ")");
  const T* P = params.data();
  T* G = opt.backward ? grads.data() : nullptr;
  auto p = [&](R role, int l = -1, int e = -1) { return P + table_.at(role, l, e); };
  auto g = [&](R role, int l = -1, int e = -1) { return G ? G + table_.at(role, l, e) : nullptr; };
  const R head = table_.has(R::LmHead) ? R::LmHead : R::Embedding;  // tied embeddings
  OpProfile* prof = profile;
  auto mm = [&](int64_t in, int64_t out) { return 2.0 * double(rows) * double(in) * double(out); };  // matmul FLOPs

  std::vector<int64_t> positions(static_cast<size_t>(rows));
  for (int64_t i = 0; i < rows; ++i) positions[size_t(i)] = i % seq;
  const RopeAngles<T> rope(c.rope_theta, c.rotary_dim, positions.data(), rows);
  AttentionShape as;
  as.tokens = seq;
  as.q_heads = Hq;
  as.kv_heads = Hkv;
  as.head_dim = D;
  as.index_dim = Di;
  as.block = c.sparse.sparse_block_size;
  as.topk = c.sparse.sparse_topk_blocks;
  const int64_t qw = int64_t(Hq) * D, kw = int64_t(Hkv) * D;
  const FfnShape fs{H, c.swiglu_alpha, c.swiglu_limit};
  MoeShape ms;
  ms.ffn = fs;
  ms.experts = c.num_local_experts;
  ms.top_k = c.num_experts_per_tok;
  ms.routed_scaling = c.routed_scaling_factor;
  ms.balance_coef = opt.balance_coef;
  ms.seq = seq;
  auto ffn_params = [&](R gate, R up, R down, int l, int e, int64_t width) {
    return FfnParams<T>{p(gate, l, e), p(up, l, e), p(down, l, e), width};
  };
  auto ffn_grads = [&](R gate, R up, R down, int l, int e) {
    return FfnGrads<T>{g(gate, l, e), g(up, l, e), g(down, l, e)};
  };
  auto moe_params = [&](int l) {
    MoeParams<T> w;
    w.router = p(R::RouterGate, l);
    w.bias = c.use_routing_bias ? p(R::RoutingBias, l) : nullptr;
    for (int e = 0; e < c.num_local_experts; ++e)
      w.experts.push_back(ffn_params(R::ExpertGate, R::ExpertUp, R::ExpertDown, l, e, c.intermediate_size));
    w.has_shared = c.n_shared_experts > 0;
    if (w.has_shared)
      w.shared = ffn_params(R::SharedGate, R::SharedUp, R::SharedDown, l, -1,
                            int64_t(c.shared_intermediate_size) * c.n_shared_experts);
    return w;
  };

  StepStats st;
  st.layer_kl.assign(static_cast<size_t>(layers), 0.0);
  st.layer_recall.assign(static_cast<size_t>(layers), -1.0);
  st.expert_load.assign(static_cast<size_t>(layers), {});
  if (decisions != nullptr && !use_given) {
    decisions->blocks.assign(static_cast<size_t>(layers), {});
    decisions->experts.assign(static_cast<size_t>(layers), {});
  }

  std::vector<T> x(size_t(rows * H));
  const T* embed = p(R::Embedding);
  for (int64_t i = 0; i < rows; ++i) std::copy_n(embed + int64_t(tokens[i]) * H, H, x.data() + i * H);

  std::vector<LayerSaved<T>> saved(static_cast<size_t>(layers));
  std::vector<T> y(size_t(rows * H));
  for (int l = 0; l < layers; ++l) {
    LayerSaved<T>& S = saved[size_t(l)];
    const bool msa = c.is_sparse_layer(l);
    S.x_in = x;
    S.inv1.resize(static_cast<size_t>(rows));
    S.h1.resize(size_t(rows * H));
    {
      OpScope op(prof, "rmsnorm", false);
      rmsnorm_forward(x.data(), p(R::InputNorm, l), rows, H, eps, S.h1.data(), S.inv1.data());
    }

    // Main attention projections, per-head norm, RoPE (spec §3.4).
    auto project = [&](R proj, R norm, int heads, int dim, std::vector<T>& raw, std::vector<T>& inv,
                       std::vector<T>& out) {
      raw.resize(size_t(rows * heads * dim));
      inv.resize(size_t(rows * heads));
      out.resize(raw.size());
      const bool index = proj == R::IndexQProj || proj == R::IndexKProj;
      {
        OpScope op(prof, index ? "index projections" : "q/k/v projections", false, mm(H, int64_t(heads) * dim));
        linear_forward(pool_, S.h1.data(), p(proj, l), rows, H, int64_t(heads) * dim, raw.data());
      }
      OpScope op(prof, index ? "index norm + rope" : "q/k norm + rope", false);
      rmsnorm_forward(raw.data(), p(norm, l), rows * heads, dim, eps, out.data(), inv.data());
      rope_rotate(rope, out.data(), rows, heads, dim, false);
    };
    project(R::QProj, R::QNorm, Hq, D, S.q_raw, S.q_inv, S.q);
    project(R::KProj, R::KNorm, Hkv, D, S.k_raw, S.k_inv, S.k);
    S.v.resize(size_t(rows * kw));
    {
      OpScope op(prof, "q/k/v projections", false, mm(H, kw));
      linear_forward(pool_, S.h1.data(), p(R::VProj, l), rows, H, kw, S.v.data());
    }

    // Index branch and selection (spec §4.1-§4.4), per sequence.
    std::vector<T> iq_raw, iq_inv, iq, ik_raw, ik_inv, ik;
    if (msa) {
      project(R::IndexQProj, R::IndexQNorm, Hkv, Di, iq_raw, iq_inv, iq);
      project(R::IndexKProj, R::IndexKNorm, 1, Di, ik_raw, ik_inv, ik);
      for (int64_t b = 0; b < batch; ++b) {
        if (use_given) {
          M3_CHECK(size_t(l) < decisions->blocks.size() && size_t(b) < decisions->blocks[size_t(l)].size(),
                   "training: no given block choice for layer ", l, ", sequence ", b);
          S.choice.push_back(decisions->blocks[size_t(l)][size_t(b)]);
        } else {
          OpScope op(prof, "msa selection", false);
          S.choice.push_back(msa_select(pool_, as, iq.data() + b * seq * Hkv * Di, ik.data() + b * seq * Di));
        }
      }
      if (decisions != nullptr && !use_given) decisions->blocks[size_t(l)] = S.choice;
    }
    S.sparse_attention = msa && !opt.indexer_warmup;

    S.o.resize(size_t(rows * qw));
    S.lse.resize(size_t(rows * Hq));
    for (int64_t b = 0; b < batch; ++b) {
      OpScope op(prof, "attention", false);
      attention_forward(pool_, as, S.q.data() + b * seq * qw, S.k.data() + b * seq * kw, S.v.data() + b * seq * kw,
                        S.sparse_attention ? &S.choice[size_t(b)] : nullptr, S.o.data() + b * seq * qw,
                        S.lse.data() + b * seq * Hq);
    }

    if (msa) {
      // The indexer's KL, and its backward into the index branch alone (its input h1 is detached).
      const double coef = 1.0 / (double(Hkv) * double(rows));
      std::vector<T> diq(iq.size()), dik(ik.size());
      double kl = 0.0;
      for (int64_t b = 0; b < batch; ++b) {
        OpScope op(prof, "indexer KL (fwd + bwd)", true);
        kl += indexer_kl(pool_, as, S.q.data() + b * seq * qw, S.k.data() + b * seq * kw, S.lse.data() + b * seq * Hq,
                         iq.data() + b * seq * Hkv * Di, ik.data() + b * seq * Di,
                         S.sparse_attention ? &S.choice[size_t(b)] : nullptr, coef, diq.data() + b * seq * Hkv * Di,
                         dik.data() + b * seq * Di)
                  .kl_sum;
      }
      st.layer_kl[size_t(l)] = kl * coef;
      if (G != nullptr) {
        auto back = [&](R proj, R norm, int heads, std::vector<T>& d, const std::vector<T>& raw,
                        const std::vector<T>& inv) {
          {
            OpScope op(prof, "index norm + rope", true);
            rope_rotate(rope, d.data(), rows, heads, Di, true);
            rmsnorm_backward(raw.data(), p(norm, l), inv.data(), d.data(), rows * heads, Di, d.data(), g(norm, l));
          }
          OpScope op(prof, "index projections", true, mm(H, int64_t(heads) * Di));
          linear_backward<T>(pool_, S.h1.data(), p(proj, l), d.data(), rows, H, int64_t(heads) * Di, nullptr,
                             g(proj, l));
        };
        back(R::IndexQProj, R::IndexQNorm, Hkv, diq, iq_raw, iq_inv);
        back(R::IndexKProj, R::IndexKNorm, 1, dik, ik_raw, ik_inv);
      }
      if (opt.measure_recall) {
        // Recall = exp(lse over the selected keys − lse over all causal keys), per head, over the
        // rows whose selection is sparse.
        double sum = 0.0;
        int64_t count = 0;
        OpScope op(prof, "indexer recall (evaluation)", false);
        std::vector<T> lse_other(size_t(seq * Hq));
        for (int64_t b = 0; b < batch; ++b) {
          const T* qb = S.q.data() + b * seq * qw;
          const T* kb = S.k.data() + b * seq * kw;
          const T* vb = S.v.data() + b * seq * kw;
          attention_forward<T>(pool_, as, qb, kb, vb, S.sparse_attention ? nullptr : &S.choice[size_t(b)], nullptr,
                               lse_other.data());
          const T* lse = S.lse.data() + b * seq * Hq;
          for (int64_t t = as.topk * int64_t(as.block); t < seq; ++t)
            for (int h = 0; h < Hq; ++h) {
              const double sel = double(S.sparse_attention ? lse[t * Hq + h] : lse_other[size_t(t * Hq + h)]);
              const double all = double(S.sparse_attention ? lse_other[size_t(t * Hq + h)] : lse[t * Hq + h]);
              sum += std::exp(sel - all);
              ++count;
            }
        }
        if (count > 0) st.layer_recall[size_t(l)] = sum / double(count);
      }
    }

    {
      OpScope op(prof, "o projection", false, mm(qw, H));
      linear_forward(pool_, S.o.data(), p(R::OProj, l), rows, qw, H, y.data());
    }
    for (size_t i = 0; i < x.size(); ++i) x[i] += y[i];
    S.x_mid = x;
    S.inv2.resize(static_cast<size_t>(rows));
    S.h2.resize(size_t(rows * H));
    {
      OpScope op(prof, "rmsnorm", false);
      rmsnorm_forward(x.data(), p(R::PostAttentionNorm, l), rows, H, eps, S.h2.data(), S.inv2.data());
    }
    const double shared_width = double(c.shared_intermediate_size) * c.n_shared_experts;
    const double moe_flops = mm(H, c.num_local_experts) + 3.0 * mm(H, c.intermediate_size) * c.num_experts_per_tok +
                             3.0 * mm(H, 1) * shared_width;
    const double mlp_flops = 3.0 * mm(H, c.dense_intermediate_size);
    if (c.is_moe_layer(l)) {
      const int32_t* fixed = nullptr;
      if (use_given) {
        M3_CHECK(size_t(l) < decisions->experts.size() &&
                     decisions->experts[size_t(l)].size() == size_t(rows * c.num_experts_per_tok),
                 "training: no given expert choice for layer ", l);
        fixed = decisions->experts[size_t(l)].data();
      }
      {
        OpScope op(prof, "moe (router + experts)", false, moe_flops);
        moe_forward(pool_, ms, moe_params(l), S.h2.data(), rows, fixed, S.moe, y.data());
      }
      if (decisions != nullptr && !use_given) decisions->experts[size_t(l)] = S.moe.chosen;
      st.balance += S.moe.balance_loss;
      auto& load = st.expert_load[size_t(l)];
      for (const auto& ex : S.moe.expert) load.push_back(int64_t(ex.rows.size()));
    } else {
      OpScope op(prof, "dense mlp", false, mlp_flops);
      ffn_forward(pool_, fs, ffn_params(R::MlpGate, R::MlpUp, R::MlpDown, l, -1, c.dense_intermediate_size),
                  S.h2.data(), rows, S.mlp, y.data());
    }
    for (size_t i = 0; i < x.size(); ++i) x[i] += y[i];
  }

  // Final norm, lm_head, cross-entropy.
  std::vector<T> inv_final(static_cast<size_t>(rows)), y_final(size_t(rows * H)), logits(size_t(rows * V));
  {
    OpScope op(prof, "rmsnorm", false);
    rmsnorm_forward(x.data(), p(R::FinalNorm), rows, H, eps, y_final.data(), inv_final.data());
  }
  {
    OpScope op(prof, "lm head", false, mm(H, V));
    linear_forward(pool_, y_final.data(), p(head), rows, H, V, logits.data());
  }
  if (opt.want_argmax)
    for (int64_t i = 0; i < rows; ++i) {
      const T* z = logits.data() + i * V;
      st.argmax.push_back(int32_t(std::max_element(z, z + V) - z));
    }
  {
    OpScope op(prof, "cross-entropy", false);
    st.ce = cross_entropy(pool_, logits.data(), targets, rows, V, logits.data());  // logits now hold dlogits
  }
  for (int64_t i = 0; i < rows; ++i) st.targets += targets[i] >= 0;
  for (double kl : st.layer_kl) st.kl += kl;
  if (G == nullptr) return st;

  std::vector<T> dx(size_t(rows * H)), dh(size_t(rows * H)), tmp(size_t(rows * H));
  {
    OpScope op(prof, "lm head", true, 2.0 * mm(H, V));
    linear_backward(pool_, y_final.data(), p(head), logits.data(), rows, H, V, dh.data(), g(head));
  }
  {
    OpScope op(prof, "rmsnorm", true);
    rmsnorm_backward(x.data(), p(R::FinalNorm), inv_final.data(), dh.data(), rows, H, dx.data(), g(R::FinalNorm));
  }

  for (int l = layers - 1; l >= 0; --l) {
    LayerSaved<T>& S = saved[size_t(l)];
    // x_out = x_mid + FFN(norm(x_mid))
    if (c.is_moe_layer(l)) {
      MoeGrads<T> mg;
      mg.router = g(R::RouterGate, l);
      for (int e = 0; e < c.num_local_experts; ++e)
        mg.experts.push_back(ffn_grads(R::ExpertGate, R::ExpertUp, R::ExpertDown, l, e));
      if (c.n_shared_experts > 0) mg.shared = ffn_grads(R::SharedGate, R::SharedUp, R::SharedDown, l, -1);
      const double flops = 2.0 * (mm(H, c.num_local_experts) + 3.0 * mm(H, c.intermediate_size) * c.num_experts_per_tok +
                                  3.0 * mm(H, 1) * double(c.shared_intermediate_size) * c.n_shared_experts);
      OpScope op(prof, "moe (router + experts)", true, flops);
      moe_backward(pool_, ms, moe_params(l), mg, S.h2.data(), rows, S.moe, dx.data(), dh.data());
    } else {
      OpScope op(prof, "dense mlp", true, 6.0 * mm(H, c.dense_intermediate_size));
      ffn_backward(pool_, fs, ffn_params(R::MlpGate, R::MlpUp, R::MlpDown, l, -1, c.dense_intermediate_size),
                   ffn_grads(R::MlpGate, R::MlpUp, R::MlpDown, l, -1), S.h2.data(), rows, S.mlp, dx.data(), dh.data(),
                   false);
    }
    {
      OpScope op(prof, "rmsnorm", true);
      rmsnorm_backward(S.x_mid.data(), p(R::PostAttentionNorm, l), S.inv2.data(), dh.data(), rows, H, tmp.data(),
                       g(R::PostAttentionNorm, l));
      add_into(dx, tmp);
    }

    // x_mid = x_in + o_proj(attention(norm(x_in)))
    std::vector<T> d_o(S.o.size()), dq(S.q.size()), dk(S.k.size()), dv(S.v.size());
    {
      OpScope op(prof, "o projection", true, 2.0 * mm(qw, H));
      linear_backward(pool_, S.o.data(), p(R::OProj, l), dx.data(), rows, qw, H, d_o.data(), g(R::OProj, l));
    }
    for (int64_t b = 0; b < batch; ++b) {
      OpScope op(prof, "attention", true);
      attention_backward(pool_, as, S.q.data() + b * seq * qw, S.k.data() + b * seq * kw, S.v.data() + b * seq * kw,
                         S.sparse_attention ? &S.choice[size_t(b)] : nullptr, S.o.data() + b * seq * qw,
                         S.lse.data() + b * seq * Hq, d_o.data() + b * seq * qw, dq.data() + b * seq * qw,
                         dk.data() + b * seq * kw, dv.data() + b * seq * kw);
    }
    auto unproject = [&](R proj, R norm, int heads, std::vector<T>& d, const std::vector<T>& raw,
                         const std::vector<T>& inv, bool accumulate) {
      {
        OpScope op(prof, "q/k norm + rope", true);
        rope_rotate(rope, d.data(), rows, heads, D, true);
        rmsnorm_backward(raw.data(), p(norm, l), inv.data(), d.data(), rows * heads, D, d.data(), g(norm, l));
      }
      OpScope op(prof, "q/k/v projections", true, 2.0 * mm(H, int64_t(heads) * D));
      linear_backward(pool_, S.h1.data(), p(proj, l), d.data(), rows, H, int64_t(heads) * D, dh.data(), g(proj, l),
                      accumulate);
    };
    unproject(R::QProj, R::QNorm, Hq, dq, S.q_raw, S.q_inv, false);
    unproject(R::KProj, R::KNorm, Hkv, dk, S.k_raw, S.k_inv, true);
    {
      OpScope op(prof, "q/k/v projections", true, 2.0 * mm(H, kw));
      linear_backward(pool_, S.h1.data(), p(R::VProj, l), dv.data(), rows, H, kw, dh.data(), g(R::VProj, l), true);
    }
    OpScope op(prof, "rmsnorm", true);
    rmsnorm_backward(S.x_in.data(), p(R::InputNorm, l), S.inv1.data(), dh.data(), rows, H, tmp.data(),
                     g(R::InputNorm, l));
    add_into(dx, tmp);
  }
  OpScope op(prof, "embedding", true);
  embedding_backward(tokens, dx.data(), rows, H, g(R::Embedding));
  return st;
}

template class TrainModel<float>;
template class TrainModel<double>;

}  // namespace m3::train
