#include "train/trainer.h"

#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>

#include <nlohmann/json.hpp>

#include "m3/error.h"
#include "m3/tokenizer.h"
#include "base/read_file.h"
#include "io/model_config.h"
#include "io/safetensors.h"
#include "train/dataset.h"
#include "train/loss_plot.h"
#include "train/moe_balance.h"
#include "train/synthetic_tasks.h"
#include "train/train_model.h"

namespace m3::train {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

// Fresh weights: matrices N(0, std) (the residual output projections scaled by 1/√(2·layers), as
// GPT-2 does, so the residual stream does not grow with depth), Gemma norm weights 0 (scale 1),
// routing bias 0.
void init_fresh(const ParameterTable& table, const TextConfig& cfg, double std_dev, uint64_t seed,
                std::vector<float>& params) {
  std::mt19937_64 rng(seed);
  const double residual = 1.0 / std::sqrt(2.0 * cfg.num_hidden_layers);
  for (size_t i = 0; i < table.specs().size(); ++i) {
    const TensorSpec& s = table.specs()[i];
    float* p = params.data() + table.offset(i);
    if (s.storage == TensorStorage::Vector) {
      std::fill_n(p, s.numel(), 0.0f);
      continue;
    }
    const bool out_proj = s.role == TensorRole::OProj || s.role == TensorRole::MlpDown ||
                          s.role == TensorRole::ExpertDown || s.role == TensorRole::SharedDown;
    std::normal_distribution<double> d(0.0, std_dev * (out_proj ? residual : 1.0));
    for (int64_t j = 0; j < s.numel(); ++j) p[j] = float(d(rng));
  }
}

std::string exact(double v) {
  char b[40];
  std::snprintf(b, sizeof b, "%.17g", v);
  return b;
}

TensorData vector_tensor(const std::string& name, const std::vector<float>& v) {
  TensorData t{name, DType::F32, {int64_t(v.size())}, std::vector<uint8_t>(v.size() * sizeof(float))};
  std::memcpy(t.bytes.data(), v.data(), t.bytes.size());
  return t;
}

void read_vector(const TensorStore& store, const std::string& name, std::vector<float>& out) {
  const TensorView& t = store.get(name);
  M3_CHECK(t.dtype == DType::F32 && size_t(t.numel()) == out.size(), store.source(), ": ", name, " holds ",
           t.numel(), " values, the model has ", out.size());
  std::memcpy(out.data(), t.data, out.size() * sizeof(float));
}

// Where the data comes from: packed windows of a corpus, or task examples.
class BatchSource {
 public:
  BatchSource(const Recipe& r, const Tokenizer& tok, int32_t end_id) : r_(r), tok_(tok), end_id_(end_id) {
    if (!r.files.empty()) {
      streams_ = tokenize_documents(r.files, tok, end_id, r.valid_fraction);
      train_ = std::make_unique<WindowSampler>(streams_.train, r.seq_len, r.seed);
      if (int64_t(streams_.valid.size()) > r.seq_len) valid_ = std::make_unique<WindowSampler>(streams_.valid, r.seq_len, 0);
    } else {
      const int64_t tokens = r.task_tokens > 0 ? r.task_tokens : r.seq_len - 16;
      gen_ = std::make_unique<TaskGenerator>(parse_task_kind(r.task), tok, tokens, r.task_tokens_min);
      task_rng_.seed(r.seed);
      // Held out: its own stream, every example at the full length.
      const TaskGenerator full(parse_task_kind(r.task), tok, tokens);
      std::mt19937_64 eval_rng(r.seed ^ 0xE7A1'5EEDull);
      for (int64_t i = 0; i < r.eval_examples; ++i) eval_.push_back(full.make(eval_rng));
      // Every held-out example must fit a row with its whole answer, or it could not be scored.
      for (const TaskExample& ex : eval_) {
        const int64_t n = int64_t(tok.encode(ex.prompt).size() + tok.encode(ex.answer).size());
        longest_ = std::max(longest_, n);
      }
      M3_CHECK(longest_ < r.seq_len, r.source, ": task examples of data.task_tokens ", tokens, " run to ", longest_,
               " tokens with their answer, more than seq_len ", r.seq_len, " holds (lower data.task_tokens)");
    }
  }
  bool is_task() const { return gen_ != nullptr; }
  std::string describe() const {
    std::ostringstream s;
    if (is_task())
      s << "task " << r_.task << " (" << r_.eval_examples << " held-out examples, the longest " << longest_
        << " tokens with its answer)";
    else
      s << streams_.documents << " documents, " << streams_.train.size() << " training tokens (" << train_->windows()
        << " windows of " << r_.seq_len << "), " << streams_.valid.size() << " held-out tokens";
    return s.str();
  }
  void next(int32_t* tokens, int32_t* targets) {
    if (is_task()) task_row(tok_, gen_->make(task_rng_), end_id_, r_.seq_len, r_.answer_only, tokens, targets);
    else train_->next(tokens, targets);
  }
  // Held-out rows: the first windows of the held-out stream, or the held-out examples.
  int64_t eval_rows() const {
    if (is_task()) return int64_t(eval_.size());
    return valid_ ? std::min(valid_->windows(), r_.eval_batches * r_.batch_size) : 0;
  }
  void eval_row(int64_t i, int32_t* tokens, int32_t* targets) const {
    if (is_task()) task_row(tok_, eval_[size_t(i)], end_id_, r_.seq_len, true, tokens, targets);
    else valid_->window(i, tokens, targets);
  }

  json state() const {
    if (is_task()) {
      std::ostringstream s;
      s << task_rng_;
      return {{"task_rng", s.str()}};
    }
    return {{"epoch", train_->epoch()}, {"window", train_->index()}};
  }
  void restore(const json& j) {
    if (is_task()) {
      std::istringstream s(j.at("task_rng").get<std::string>());
      s >> task_rng_;
      M3_CHECK(!s.fail(), "resume: the task generator state does not parse");
    } else {
      train_->seek(j.at("epoch").get<int64_t>(), j.at("window").get<int64_t>());
    }
  }

 private:
  const Recipe& r_;
  const Tokenizer& tok_;
  int32_t end_id_;
  TokenStreams streams_;
  std::unique_ptr<WindowSampler> train_, valid_;
  std::unique_ptr<TaskGenerator> gen_;
  std::mt19937_64 task_rng_;
  std::vector<TaskExample> eval_;
  int64_t longest_ = 0;
};

struct EvalResult {
  double loss = 0.0, kl = 0.0, accuracy = -1.0;
  std::vector<double> recall;
};

// Held-out loss (with the model's attention at this stage of the recipe), KL, indexer recall and,
// for tasks, exact-match accuracy of the answer under greedy decoding (the argmax of every answer
// token given the ones before it, which is what greedy generation produces).
EvalResult evaluate(TrainModel<float>& model, const BatchSource& data, const Recipe& r, bool dense) {
  EvalResult out;
  const int64_t rows = data.eval_rows();
  if (rows == 0) return out;
  const int64_t T = r.seq_len, L = model.config().num_hidden_layers;
  std::vector<int32_t> tokens(size_t(r.batch_size * T)), targets(tokens.size());
  StepOptions opt;
  opt.backward = false;
  opt.indexer_warmup = dense;
  opt.measure_recall = true;
  opt.want_argmax = data.is_task();
  double loss = 0.0, kl = 0.0;
  int64_t scored = 0, correct = 0, batches = 0;
  std::vector<double> recall(size_t(L), 0.0);
  std::vector<int64_t> recall_n(size_t(L), 0);
  for (int64_t first = 0; first < rows; first += r.batch_size) {
    const int64_t n = std::min(r.batch_size, rows - first);
    for (int64_t i = 0; i < n; ++i) data.eval_row(first + i, tokens.data() + i * T, targets.data() + i * T);
    const StepStats st = model.forward_backward(tokens.data(), targets.data(), n, T, opt);
    loss += st.ce * double(st.targets);
    scored += st.targets;
    kl += st.kl;
    ++batches;
    for (int64_t l = 0; l < L; ++l)
      if (st.layer_recall[size_t(l)] >= 0) {
        recall[size_t(l)] += st.layer_recall[size_t(l)];
        ++recall_n[size_t(l)];
      }
    if (data.is_task())
      for (int64_t i = 0; i < n; ++i) {
        int64_t answer = 0, right = 0;
        for (int64_t t = 0; t < T; ++t) {
          const int32_t want = targets[size_t(i * T + t)];
          if (want < 0) continue;
          ++answer;
          right += st.argmax[size_t(i * T + t)] == want;
        }
        correct += answer > 0 && right == answer;
      }
  }
  out.loss = scored ? loss / double(scored) : 0.0;
  out.kl = kl / double(batches);
  for (int64_t l = 0; l < L; ++l) out.recall.push_back(recall_n[size_t(l)] ? recall[size_t(l)] / double(recall_n[size_t(l)]) : -1.0);
  if (data.is_task()) out.accuracy = double(correct) / double(rows);
  return out;
}

void write_checkpoint(const std::string& dir, const ModelConfig& cfg, const std::string& model_dir,
                      const TrainModel<float>& model, const AdamW& opt, const json& state) {
  fs::create_directories(dir);
  ModelConfig out = cfg;
  out.quantization.reset();  // the weights are F32
  std::ofstream(fs::path(dir) / "config.json") << out.to_json_text();
  for (const char* f : {"tokenizer.json", "tokenizer_config.json", "generation_config.json", "chat_template.jinja"}) {
    std::error_code ec;
    if (fs::exists(fs::path(model_dir) / f))
      fs::copy_file(fs::path(model_dir) / f, fs::path(dir) / f, fs::copy_options::overwrite_existing, ec);
  }
  write_checkpoint_tensors(dir, parameter_tensors(model.table(), model.params.data(), false), UINT64_MAX);
  write_safetensors((fs::path(dir) / "optimizer.safetensors").string(),
                    {vector_tensor("adam.m", opt.m()), vector_tensor("adam.v", opt.v())});
  std::ofstream(fs::path(dir) / "trainer_state.json") << state.dump(2) << "\n";
}

}  // namespace

void run_training(const Recipe& r, const std::string& resume, ThreadPool& pool, const TrainHooks& hooks) {
  validate_recipe(r);
  auto say = [&](const std::string& s) {
    if (hooks.message) hooks.message(s);
  };
  const std::string model_dir = r.model.dir;
  const ModelConfig cfg = ModelConfig::from_file((fs::path(model_dir) / "config.json").string());
  const auto tok = Tokenizer::from_file((fs::path(model_dir) / "tokenizer.json").string());
  M3_CHECK(cfg.text.eos_token_id.has_value(), model_dir, "/config.json: eos_token_id is needed to separate documents");
  const int32_t end_id = *cfg.text.eos_token_id;
  const TextConfig& t = cfg.text;
  M3_CHECK(r.seq_len <= t.max_position_embeddings, r.source, ": seq_len ", r.seq_len, " exceeds the model's ",
           "max_position_embeddings ", t.max_position_embeddings);
  if (r.attention == "msa") {
    const int64_t budget = int64_t(t.sparse.sparse_topk_blocks) * t.sparse.sparse_block_size;
    if (budget >= r.seq_len)
      say("note: the selection budget (top-k " + std::to_string(t.sparse.sparse_topk_blocks) + " x block " +
          std::to_string(t.sparse.sparse_block_size) + ") covers seq_len " + std::to_string(r.seq_len) +
          ": MSA never selects, attention is dense");
  }

  TrainModel<float> model(cfg, pool);
  const ParameterTable& table = model.table();
  if (r.init == "keep") {
    const TensorStore store = TensorStore::open_dir(model_dir);
    model.params = load_parameters<float>(store, cfg, table);
  } else {
    init_fresh(table, t, r.init_std, r.seed, model.params);
  }
  model.grads.assign(model.params.size(), 0.0f);
  AdamW opt(table, r.optimizer);
  ScheduleOptions sched = r.schedule;
  sched.total_steps = r.steps;
  BatchSource data(r, *tok, end_id);
  say("data: " + data.describe());
  say("model: " + std::to_string(table.total()) + " parameters, " + std::to_string(t.num_hidden_layers) + " layers");

  fs::create_directories(r.out);
  const std::string log_path = (fs::path(r.out) / "log.jsonl").string();
  int64_t step = 0;
  if (!resume.empty()) {
    const json state = json::parse(read_whole_file((fs::path(resume) / "trainer_state.json").string(), "trainer state"));
    step = state.at("step").get<int64_t>();
    const TensorStore weights = TensorStore::open_dir(resume);
    model.params = load_parameters<float>(weights, cfg, table);
    const TensorStore o = TensorStore::open_file((fs::path(resume) / "optimizer.safetensors").string());
    read_vector(o, "adam.m", opt.m());
    read_vector(o, "adam.v", opt.v());
    opt.set_steps(state.at("adam_steps").get<int64_t>());
    data.restore(state.at("data"));
    // The log keeps the lines up to the checkpoint; the resumed run appends its own.
    std::vector<std::string> kept;
    std::ifstream in(log_path);
    for (std::string line; std::getline(in, line);) {
      const json j = json::parse(line, nullptr, false);
      if (!j.is_discarded() && j.value("step", int64_t(0)) <= step) kept.push_back(line);
    }
    std::ofstream rewrite(log_path, std::ios::trunc);
    for (const std::string& line : kept) rewrite << line << "\n";
    say("resumed from " + resume + " at step " + std::to_string(step));
  } else {
    std::ofstream(log_path, std::ios::trunc);
  }
  std::ofstream log(log_path, std::ios::app);
  std::ofstream(fs::path(r.out) / "recipe.json") << recipe_to_json(r) << "\n";

  const int64_t T = r.seq_len, B = r.batch_size, L = t.num_hidden_layers;
  std::vector<int32_t> tokens(size_t(B * T)), targets(tokens.size());
  const auto start = std::chrono::steady_clock::now();
  const int64_t first_step = step;
  int64_t tokens_done = 0;
  std::string plot_problem;
  for (; step < r.steps; ++step) {
    const bool dense = r.dense_at(step);
    std::fill(model.grads.begin(), model.grads.end(), 0.0f);
    StepOptions so;
    so.indexer_warmup = dense;
    so.balance_coef = r.balance_loss;
    double loss = 0.0, kl = 0.0, balance = 0.0;
    std::vector<double> layer_kl(size_t(L), 0.0);
    std::vector<std::vector<int64_t>> loads(static_cast<size_t>(L));
    for (int64_t micro = 0; micro < r.grad_accum; ++micro) {
      for (int64_t b = 0; b < B; ++b) data.next(tokens.data() + b * T, targets.data() + b * T);
      const StepStats st = model.forward_backward(tokens.data(), targets.data(), B, T, so);
      loss += st.ce / double(r.grad_accum);
      kl += st.kl / double(r.grad_accum);
      balance += st.balance / double(r.grad_accum);
      for (int64_t l = 0; l < L; ++l) {
        layer_kl[size_t(l)] += st.layer_kl[size_t(l)] / double(r.grad_accum);
        auto& acc = loads[size_t(l)];
        if (acc.empty()) acc = st.expert_load[size_t(l)];
        else for (size_t e = 0; e < acc.size(); ++e) acc[e] += st.expert_load[size_t(l)][e];
      }
    }
    if (r.grad_accum > 1)
      for (float& g : model.grads) g /= float(r.grad_accum);
    const double lr = learning_rate(sched, r.optimizer.lr, step);
    const ClipReport clip = opt.step(pool, model.params, model.grads, lr);
    if (r.bias_update_rate > 0) update_routing_bias(table, loads, r.bias_update_rate, model.params);
    M3_CHECK(std::isfinite(loss), "training diverged at step ", step + 1, ": the loss is ", loss,
             " (lower optimizer.lr or raise warm-up)");

    tokens_done += B * T * r.grad_accum;
    const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    json line = {{"kind", "train"}, {"step", step + 1}, {"lr", lr}, {"loss", loss}, {"kl", kl},
                 {"layer_kl", layer_kl}, {"balance_loss", balance}, {"grad_norm", clip.backbone_norm}, {"indexer_grad_norm", clip.indexer_norm},
                 {"stage", dense ? "dense" : "sparse"}, {"tokens", (step + 1) * B * T * r.grad_accum},
                 {"tokens_per_s", double(tokens_done) / elapsed}, {"elapsed_s", elapsed}};
    json imbalance = json::array();
    for (int64_t l = 0; l < L; ++l) {
      if (loads[size_t(l)].empty()) continue;
      line["expert_load"][std::to_string(l)] = loads[size_t(l)];
      imbalance.push_back(load_imbalance(loads[size_t(l)]));
    }
    line["expert_imbalance"] = imbalance;
    log << line.dump() << "\n";
    log.flush();
    if (hooks.progress) {
      Progress p;
      p.step = step + 1;
      p.steps = r.steps;
      p.loss = loss;
      p.tokens_per_s = double(tokens_done) / elapsed;
      p.elapsed_s = elapsed;
      p.eta_s = elapsed / double(step + 1 - first_step) * double(r.steps - step - 1);
      p.dense = dense;
      hooks.progress(p);
    }

    const bool last = step + 1 == r.steps;
    if ((step + 1) % r.eval_every == 0 || last) {
      const EvalResult ev = evaluate(model, data, r, r.attention == "dense");
      json e = {{"kind", "eval"}, {"step", step + 1}, {"val_loss", ev.loss}, {"val_kl", ev.kl}, {"recall", ev.recall}};
      std::ostringstream msg;
      msg << "eval at step " << step + 1 << ": held-out loss " << ev.loss << ", KL " << ev.kl;
      if (ev.accuracy >= 0) {
        e["accuracy"] = ev.accuracy;
        msg << ", answer accuracy " << ev.accuracy * 100 << "%";
      }
      msg << ", recall";
      for (double v : ev.recall)
        if (v >= 0) msg << " " << v;
      log << e.dump() << "\n";
      log.flush();
      say(msg.str());
      std::string why;
      if (!write_loss_plot(log_path, (fs::path(r.out) / "loss.png").string(), why) && why != plot_problem) {
        plot_problem = why;
        say("no loss.png: " + why);
      }
    }
    if ((r.checkpoint_every > 0 && (step + 1) % r.checkpoint_every == 0) || last) {
      const std::string dir = (fs::path(r.out) / ("checkpoint-" + std::to_string(step + 1))).string();
      json state = {{"step", step + 1}, {"adam_steps", opt.steps()}, {"data", data.state()},
                    {"loss", exact(loss)}, {"recipe", json::parse(recipe_to_json(r))}};
      write_checkpoint(dir, cfg, model_dir, model, opt, state);
      say("checkpoint " + dir);
    }
  }
}

}  // namespace m3::train
