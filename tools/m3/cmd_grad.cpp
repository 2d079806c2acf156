// m3 grad: the gradient of one batch, for external checking (docs/TRAINING.md). Writes F32 tensors
// named as the checkpoint's parameters (e_score_correction_bias, which steers selection only and
// has no gradient, is left out), and prints the losses.
//
//   L_CE = mean over t = 0..T-2 of −log softmax(logits_t)[ids_{t+1}]
//   L_KL = Σ over MSA layers of (1/(G·T)) Σ_p Σ_g KL(P̄_g(p) ‖ Q_g(p)) over the selected support
//          (--indexer-warmup: over the whole causal history, main attention dense)
// The index branch's parameters get dL_KL/dw, every other parameter dL_CE/dw.
#include <cstdio>
#include <filesystem>
#include <string>

#include "commands.h"
#include "m3/error.h"
#include "base/thread_pool.h"
#include "io/model_config.h"
#include "io/safetensors.h"
#include "read_ids.h"
#include "train/train_model.h"
#include "usage.h"

namespace m3::cli {

void register_grad(CLI::App& app) {
  struct Args {
    std::string model, tokens, tokens_file, out;
    bool warmup = false;
    int threads = 0;
  };
  auto a = std::make_shared<Args>();
  CLI::App* cmd = app.add_subcommand("grad", "Write the gradient of one batch's training losses (F32 safetensors)");
  cmd->add_option("-m,--model", a->model, "Model folder (config.json + safetensors)")->required();
  auto* g = cmd->add_option_group("input");
  g->add_option("--tokens", a->tokens, "Token ids of one sequence, comma-separated");
  g->add_option("--tokens-file", a->tokens_file, "File of token ids");
  g->require_option(1);
  cmd->add_option("--out", a->out, "Output .safetensors file")->required();
  cmd->add_flag("--indexer-warmup", a->warmup,
                "The dense warm-up stage: main attention dense, the indexer KL over the whole causal history");
  cmd->add_option("-t,--threads", a->threads, "Threads (default: one per usable CPU)")->check(NonNegative());
  cmd->callback([a] {
    const ModelConfig cfg = ModelConfig::from_file((std::filesystem::path(a->model) / "config.json").string());
    const TensorStore store = TensorStore::open_dir(a->model);
    const std::vector<int32_t> ids =
        a->tokens.empty() ? read_ids_file(a->tokens_file) : parse_ids(a->tokens, "--tokens");
    M3_CHECK(ids.size() >= 2, "m3 grad needs at least 2 tokens (the loss predicts each next one), got ", ids.size());
    M3_CHECK(int64_t(ids.size()) <= cfg.text.max_position_embeddings, ids.size(),
             " tokens exceed max_position_embeddings ", cfg.text.max_position_embeddings);
    std::vector<int32_t> targets(ids.begin() + 1, ids.end());
    targets.push_back(-1);

    ThreadPool pool(a->threads);
    train::TrainModel<float> model(cfg, pool);
    model.params = train::load_parameters<float>(store, cfg, model.table());
    model.grads.assign(model.params.size(), 0.0f);
    train::StepOptions opt;
    opt.indexer_warmup = a->warmup;
    const train::StepStats st =
        model.forward_backward(ids.data(), targets.data(), 1, int64_t(ids.size()), opt);
    auto exact = [](double v) {
      char buf[32];
      std::snprintf(buf, sizeof buf, "%.17g", v);
      return std::string(buf);
    };
    const std::vector<TensorData> tensors = train::parameter_tensors(model.table(), model.grads.data(), true);
    write_safetensors(a->out, tensors,
                      {{"ce_loss", exact(st.ce)}, {"kl_loss", exact(st.kl)}, {"indexer_warmup", a->warmup ? "true" : "false"}});
    std::printf("ce_loss %.9g\nkl_loss %.9g\n", st.ce, st.kl);
    for (size_t l = 0; l < st.layer_kl.size(); ++l)
      if (cfg.text.is_sparse_layer(int(l))) std::printf("layer %zu kl %.9g\n", l, st.layer_kl[l]);
    std::fprintf(stderr, "wrote %s (%zu tensors)\n", a->out.c_str(), tensors.size());
  });
}

}  // namespace m3::cli
