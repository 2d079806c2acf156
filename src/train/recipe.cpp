#include "train/recipe.h"

#include <set>

#include <nlohmann/json.hpp>

#include "m3/error.h"
#include "base/read_file.h"

namespace m3::train {

namespace {

using nlohmann::json;

// Reads the keys of one JSON object, each at most once, and fails on the ones nobody asked for.
class Section {
 public:
  Section(const json& j, std::string path, const std::string& source) : j_(j), path_(std::move(path)), source_(source) {
    M3_CHECK(j.is_object(), source_, ": ", path_.empty() ? "the recipe" : path_, " must be a JSON object");
  }
  ~Section() noexcept(false) {
    if (std::uncaught_exceptions() > 0) return;
    for (auto it = j_.begin(); it != j_.end(); ++it)
      if (!seen_.count(it.key()))
        fail(source_, ": unknown key '", name(it.key()), "' (see docs/TRAINING.md for the recipe keys)");
  }
  std::string name(const std::string& key) const { return path_.empty() ? key : path_ + "." + key; }
  const json* find(const std::string& key) {
    seen_.insert(key);
    auto it = j_.find(key);
    return it == j_.end() ? nullptr : &*it;
  }
  template <typename T>
  void number(const std::string& key, T& out, double lo, double hi) {
    const json* v = find(key);
    if (!v) return;
    M3_CHECK(v->is_number(), source_, ": ", name(key), " must be a number");
    const double d = v->get<double>();
    M3_CHECK(d >= lo && d <= hi, source_, ": ", name(key), " = ", d, " is outside [", lo, ", ", hi, "]");
    if constexpr (std::is_integral_v<T>) {
      M3_CHECK(v->is_number_integer(), source_, ": ", name(key), " must be an integer");
      out = T(v->get<int64_t>());
    } else {
      out = T(d);
    }
  }
  void string(const std::string& key, std::string& out, const std::set<std::string>& allowed = {}) {
    const json* v = find(key);
    if (!v) return;
    M3_CHECK(v->is_string(), source_, ": ", name(key), " must be a string");
    out = v->get<std::string>();
    if (!allowed.empty() && !allowed.count(out)) {
      std::string list;
      for (const std::string& a : allowed) list += (list.empty() ? "" : ", ") + a;
      fail(source_, ": ", name(key), " is '", out, "' (expected one of: ", list, ")");
    }
  }
  void boolean(const std::string& key, bool& out) {
    const json* v = find(key);
    if (!v) return;
    M3_CHECK(v->is_boolean(), source_, ": ", name(key), " must be true or false");
    out = v->get<bool>();
  }

 private:
  const json& j_;
  std::string path_;
  const std::string& source_;
  std::set<std::string> seen_;
};

constexpr double kBig = 1e15;

}  // namespace

Recipe parse_recipe(const std::string& text, const std::string& source) {
  json j;
  try {
    j = json::parse(text);
  } catch (const json::exception& e) {
    fail(source, ": not valid JSON (", e.what(), ")");
  }
  Recipe r;
  r.source = source;
  Section top(j, "", source);
  if (const json* m = top.find("model")) {
    if (m->is_string()) {
      r.model.dir = m->get<std::string>();
    } else {
      Section s(*m, "model", source);
      s.string("dir", r.model.dir);
      s.string("preset", r.model.preset);
      int v = 0;
      if (s.find("layers")) { s.number("layers", v, 1, 1024); r.model.layers = v; }
      if (s.find("block_size")) { s.number("block_size", v, 1, 1 << 20); r.model.block_size = v; }
      if (s.find("topk")) { s.number("topk", v, 2, 1 << 20); r.model.topk = v; }
      s.number("seed", r.model.seed, 0, kBig);
      s.number("tokenizer_merges", r.model.tokenizer_merges, 0, 100000);
      if (const json* c = s.find("config")) {
        M3_CHECK(c->is_object(), source, ": model.config must be an object of text_config keys");
        r.model.config = c->dump();
      }
      M3_CHECK(r.model.dir.empty() != r.model.preset.empty(), source, ": model needs exactly one of dir or preset");
      M3_CHECK(r.model.dir.empty() || (!r.model.layers && !r.model.block_size && !r.model.topk && r.model.config.empty()),
               source, ": model.layers/block_size/topk/config shape a new preset model, not a folder");
    }
  }
  top.string("init", r.init, {"fresh", "keep"});
  top.number("init_std", r.init_std, 1e-6, 10);
  if (const json* d = top.find("data")) {
    Section s(*d, "data", source);
    if (const json* f = s.find("files")) {
      M3_CHECK(f->is_array(), source, ": data.files must be a list of paths");
      for (const json& p : *f) {
        M3_CHECK(p.is_string(), source, ": data.files must hold strings");
        r.files.push_back(p.get<std::string>());
      }
    }
    s.number("valid_fraction", r.valid_fraction, 0.0, 0.9);
    s.string("task", r.task, {"passkey", "multikey", "associative-recall"});
    s.number("task_tokens", r.task_tokens, 32, kBig);
    s.number("task_tokens_min", r.task_tokens_min, 32, kBig);
    s.boolean("answer_only", r.answer_only);
    s.number("eval_examples", r.eval_examples, 1, kBig);
  }
  top.number("seq_len", r.seq_len, 2, kBig);
  top.number("batch_size", r.batch_size, 1, kBig);
  top.number("grad_accum", r.grad_accum, 1, kBig);
  top.number("steps", r.steps, 1, kBig);
  if (const json* o = top.find("optimizer")) {
    Section s(*o, "optimizer", source);
    s.number("lr", r.optimizer.lr, 0.0, 10.0);
    s.number("beta1", r.optimizer.beta1, 0.0, 0.999999);
    s.number("beta2", r.optimizer.beta2, 0.0, 0.999999);
    s.number("eps", r.optimizer.eps, 0.0, 1.0);
    s.number("weight_decay", r.optimizer.weight_decay, 0.0, 10.0);
    s.number("clip", r.optimizer.clip, 0.0, kBig);
    s.number("indexer_clip", r.optimizer.indexer_clip, 0.0, kBig);
    s.number("indexer_lr_scale", r.optimizer.indexer_lr_scale, 0.0, 1000.0);
  }
  if (const json* o = top.find("schedule")) {
    Section s(*o, "schedule", source);
    s.string("kind", r.schedule.kind, {"cosine", "constant"});
    s.number("warmup_steps", r.schedule.warmup_steps, 0, kBig);
    s.number("cooldown_steps", r.schedule.cooldown_steps, 0, kBig);
    s.number("min_lr_ratio", r.schedule.min_lr_ratio, 0.0, 1.0);
  }
  if (const json* o = top.find("msa")) {
    Section s(*o, "msa", source);
    s.string("attention", r.attention, {"msa", "dense"});
    s.number("dense_warmup_steps", r.dense_warmup_steps, 0, kBig);
  }
  if (const json* o = top.find("moe")) {
    Section s(*o, "moe", source);
    s.number("bias_update_rate", r.bias_update_rate, 0.0, 1.0);
    s.number("balance_loss", r.balance_loss, 0.0, 1.0);
  }
  if (const json* o = top.find("eval")) {
    Section s(*o, "eval", source);
    s.number("every", r.eval_every, 1, kBig);
    s.number("batches", r.eval_batches, 1, kBig);
  }
  if (const json* o = top.find("checkpoint")) {
    Section s(*o, "checkpoint", source);
    s.number("every", r.checkpoint_every, 0, kBig);
  }
  top.string("out", r.out);
  top.number("seed", r.seed, 0, kBig);
  top.number("threads", r.threads, 0, 4096);
  return r;
}

Recipe read_recipe(const std::string& path) { return parse_recipe(read_whole_file(path, "recipe"), path); }

void validate_recipe(const Recipe& r) {
  const std::string& s = r.source;
  M3_CHECK(!r.model.dir.empty() || !r.model.preset.empty(), s, ": model is missing (a folder, or {\"preset\": ...})");
  M3_CHECK(!r.out.empty(), s, ": out (the run folder) is missing");
  M3_CHECK(r.files.empty() != r.task.empty(), s, ": data needs exactly one of files or task");
  M3_CHECK(r.task.empty() || r.task_tokens == 0 || r.task_tokens + 8 <= r.seq_len, s, ": data.task_tokens ",
           r.task_tokens, " leaves no room for the answer in seq_len ", r.seq_len);
  M3_CHECK(r.task_tokens_min == 0 || r.task_tokens_min <= (r.task_tokens > 0 ? r.task_tokens : r.seq_len - 16), s,
           ": data.task_tokens_min ", r.task_tokens_min, " exceeds the examples' length");
  M3_CHECK(r.schedule.warmup_steps <= r.steps, s, ": schedule.warmup_steps ", r.schedule.warmup_steps,
           " exceeds steps ", r.steps);
  M3_CHECK(r.schedule.cooldown_steps <= r.steps, s, ": schedule.cooldown_steps ", r.schedule.cooldown_steps,
           " exceeds steps ", r.steps);
}

std::string recipe_to_json(const Recipe& r) {
  json j;
  if (!r.model.dir.empty()) j["model"] = r.model.dir;
  else {
    j["model"] = {{"preset", r.model.preset}, {"seed", r.model.seed}};
    if (r.model.layers) j["model"]["layers"] = *r.model.layers;
    if (r.model.block_size) j["model"]["block_size"] = *r.model.block_size;
    if (r.model.topk) j["model"]["topk"] = *r.model.topk;
    if (!r.model.config.empty()) j["model"]["config"] = json::parse(r.model.config);
    if (r.model.tokenizer_merges > 0) j["model"]["tokenizer_merges"] = r.model.tokenizer_merges;
  }
  j["init"] = r.init;
  j["init_std"] = r.init_std;
  if (!r.files.empty()) j["data"] = {{"files", r.files}, {"valid_fraction", r.valid_fraction}};
  else
    j["data"] = {{"task", r.task}, {"task_tokens", r.task_tokens}, {"task_tokens_min", r.task_tokens_min},
                 {"answer_only", r.answer_only},
                 {"eval_examples", r.eval_examples}};
  j["seq_len"] = r.seq_len;
  j["batch_size"] = r.batch_size;
  j["grad_accum"] = r.grad_accum;
  j["steps"] = r.steps;
  const AdamWOptions& o = r.optimizer;
  j["optimizer"] = {{"lr", o.lr}, {"beta1", o.beta1}, {"beta2", o.beta2}, {"eps", o.eps},
                    {"weight_decay", o.weight_decay}, {"clip", o.clip}, {"indexer_clip", o.indexer_clip},
                    {"indexer_lr_scale", o.indexer_lr_scale}};
  j["schedule"] = {{"kind", r.schedule.kind}, {"warmup_steps", r.schedule.warmup_steps},
                   {"cooldown_steps", r.schedule.cooldown_steps}, {"min_lr_ratio", r.schedule.min_lr_ratio}};
  j["msa"] = {{"attention", r.attention}, {"dense_warmup_steps", r.dense_warmup_steps}};
  j["moe"] = {{"bias_update_rate", r.bias_update_rate}, {"balance_loss", r.balance_loss}};
  j["eval"] = {{"every", r.eval_every}, {"batches", r.eval_batches}};
  j["checkpoint"] = {{"every", r.checkpoint_every}};
  j["out"] = r.out;
  j["seed"] = r.seed;
  j["threads"] = r.threads;
  return j.dump(2);
}

}  // namespace m3::train
