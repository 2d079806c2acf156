#include "server/scheduler.h"

#include <algorithm>

#include "base/error.h"

namespace m3::server {

Scheduler::Scheduler(Engine& engine, PrefixCache& cache, Metrics& metrics, SchedulerOptions options)
    : engine_(engine), cache_(cache), metrics_(metrics), opt_(options) {
  M3_CHECK(opt_.parallel >= 1, "--parallel must be >= 1, got ", opt_.parallel);
  M3_CHECK(opt_.chunk >= opt_.parallel, "--chunk (", opt_.chunk, ") must be at least --parallel (", opt_.parallel, ")");
  thread_ = std::thread([this] { loop(); });
}

Scheduler::~Scheduler() {
  {
    std::lock_guard<std::mutex> lk(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

void Scheduler::submit(std::unique_ptr<Generation> generation) {
  std::vector<std::unique_ptr<Generation>> one;
  one.push_back(std::move(generation));
  submit(std::move(one));
}

void Scheduler::submit(std::vector<std::unique_ptr<Generation>> generations) {
  {
    std::lock_guard<std::mutex> lk(mu_);
    for (auto& g : generations) queue_.push_back(std::move(g));
  }
  cv_.notify_one();
  publish_queue();
}

void Scheduler::publish_queue() {
  int64_t waiting;
  {
    std::lock_guard<std::mutex> lk(mu_);
    waiting = int64_t(queue_.size());
  }
  metrics_.set_queue(waiting, running_count_.load());
}

void Scheduler::loop() {
  for (;;) {
    std::deque<std::unique_ptr<Generation>> arrivals;
    {
      std::unique_lock<std::mutex> lk(mu_);
      cv_.wait(lk, [&] { return stop_ || !queue_.empty() || !running_.empty(); });
      if (stop_) break;
      const size_t free_slots = size_t(opt_.parallel) - running_.size();
      while (!queue_.empty() && arrivals.size() < free_slots) {
        arrivals.push_back(std::move(queue_.front()));
        queue_.pop_front();
      }
    }
    admit(arrivals);
    for (Sequence& s : running_) {  // a waiting choice whose leader has gone (failed, cancelled) prefills itself
      if (!s.waits_for_leader || s.done || leader_in_prefill(*s.gen)) continue;
      if (!start_sequence(s)) s.done = true;
      s.waits_for_leader = false;
    }
    running_count_ = int64_t(running_.size());
    publish_queue();
    if (!running_.empty()) run_step();
    retire();
    running_count_ = int64_t(running_.size());
    publish_queue();
  }
  for (Sequence& s : running_) s.gen->complete(metrics_, /*cancelled=*/true);
  running_.clear();
  std::lock_guard<std::mutex> lk(mu_);
  for (auto& g : queue_) g->complete(metrics_, /*cancelled=*/true);
  queue_.clear();
}

void Scheduler::admit(std::deque<std::unique_ptr<Generation>>& arrivals) {
  for (auto& gen : arrivals) {
    if (gen->cancelled()) {  // the client left while the request waited
      gen->start(0);
      gen->complete(metrics_, /*cancelled=*/true);
      continue;
    }
    Sequence s;
    s.gen = std::move(gen);
    if (leader_in_prefill(*s.gen)) {
      s.gen->start(0);
      s.waits_for_leader = true;
    } else if (!start_sequence(s)) {  // e.g. no memory for the cache: this request fails, the server goes on
      s.gen->fail(s.error);
      continue;
    }
    running_.push_back(std::move(s));
  }
}

bool Scheduler::start_sequence(Sequence& s) {
  try {
    const Job& job = s.gen->job();
    auto lease = cache_.acquire(job.prompt.keys());
    s.cache = std::move(lease.cache);
    s.reused = lease.reused;
    s.pending.assign(job.prompt.ids().begin() + lease.reused, job.prompt.ids().end());
    s.media_rows = job.prompt.has_media_from(lease.reused);
    if (s.waits_for_leader) s.gen->set_reused(lease.reused);  // started when it began to wait
    else s.gen->start(lease.reused);
    return true;
  } catch (const std::exception& e) {
    s.error = e.what();
    return false;
  }
}

const Scheduler::Sequence* Scheduler::leader_in_prefill(const Generation& gen) const {
  if (!gen.group() || gen.index() == 0) return nullptr;
  for (const Sequence& s : running_)
    if (s.gen->group() == gen.group() && s.gen->index() == 0 && s.cache && !s.decoding && !s.done) return &s;
  return nullptr;
}

void Scheduler::advance(Sequence& s) {
  bool more = false;
  try {
    more = s.gen->step(s.logits.data(), s.pending);
  } catch (const std::exception& e) {  // sampling or output handling failed: only this sequence ends
    s.error = e.what();
    s.cache.reset();
    s.done = true;
    return;
  }
  if (!more) {
    s.done = true;
  } else {
    s.fed = 0;
    s.decoding = true;
    s.media_rows = false;
    s.rows = {};
  }
}

void Scheduler::run_step() {
  // Decode rows first (one token each), then prefill chunks in arrival order within the budget.
  std::vector<BatchInput> inputs;
  std::vector<size_t> owner;  // running_ index of each input
  int64_t budget = opt_.chunk;
  auto add = [&](size_t i, int64_t n) {
    Sequence& s = running_[i];
    const bool last = s.fed + size_t(n) == s.pending.size();
    BatchInput in{s.cache.get(), s.pending.data() + s.fed, nullptr, n, last ? LogitsFor::Last : LogitsFor::None, &s.logits};
    if (s.media_rows) {  // a prompt with images goes in as input rows
      s.rows.resize(size_t(n * engine_.config.text.hidden_size));
      s.gen->job().prompt.input_rows(*engine_.model, s.reused + int64_t(s.fed), n, s.rows.data());
      in.tokens = nullptr;
      in.embeddings = s.rows.data();
    }
    inputs.push_back(in);
    owner.push_back(i);
    budget -= n;
  };
  for (size_t i = 0; i < running_.size(); ++i) {
    const Sequence& s = running_[i];
    if (!s.cancelled && s.decoding) add(i, int64_t(s.pending.size()));  // 1 token, or a few forced ones
  }
  for (size_t i = 0; i < running_.size() && budget > 0; ++i) {
    const Sequence& s = running_[i];
    if (!s.cancelled && !s.decoding && !s.waits_for_leader) add(i, std::min(int64_t(s.pending.size() - s.fed), budget));
  }
  if (inputs.empty()) return;

  int64_t rows = 0;
  for (const BatchInput& in : inputs) rows += in.n;
  metrics_.count_step(int64_t(inputs.size()), rows);
  try {
    engine_.model->forward_batch(inputs);
  } catch (const std::exception& e) {
    // Their caches' contents are unknown: the sequences end with an error and the caches are dropped.
    for (size_t i : owner) {
      Sequence& s = running_[i];
      s.error = e.what();
      s.cache.reset();
      s.done = true;
    }
    return;
  }

  for (size_t k = 0; k < inputs.size(); ++k) {
    Sequence& s = running_[owner[k]];
    s.fed += size_t(inputs[k].n);
    if (inputs[k].which != LogitsFor::Last) continue;
    if (!s.decoding && s.gen->group()) {
      // The prompt is in the cache: the choice's waiting siblings share its pages and start from its logits.
      for (Sequence& f : running_) {
        if (!f.waits_for_leader || f.done || f.gen->group() != s.gen->group()) continue;
        f.waits_for_leader = false;
        try {
          f.cache = KvCache::prefix_of(*s.cache, s.cache->length());
        } catch (const std::exception& e) {
          f.error = e.what();
          f.done = true;
          continue;
        }
        f.gen->set_reused(s.cache->length());
        f.logits = s.logits;
        advance(f);
      }
    }
    advance(s);
  }
}

void Scheduler::retire() {
  // Finished sequences leave running_ and the gauges first, then their answers end: a client that has
  // its whole answer never sees itself counted as running in /metrics.
  std::vector<Sequence> finished;
  for (Sequence& s : running_) {
    if (!s.done && s.gen->cancelled()) s.cancelled = s.done = true;
    if (s.done) finished.push_back(std::move(s));
  }
  if (finished.empty()) return;
  running_.erase(std::remove_if(running_.begin(), running_.end(), [](const Sequence& s) { return s.done; }), running_.end());
  for (Sequence& s : finished) {
    if (!s.cache) continue;
    // A sequence cancelled during its prefill holds only part of the prompt.
    std::vector<int32_t> held = s.gen->cached_tokens();
    held.resize(std::min(held.size(), size_t(s.cache->length())));
    cache_.release(std::move(s.cache), std::move(held));
  }
  metrics_.set_prefix_cache(int64_t(cache_.entries()), cache_.bytes());
  running_count_ = int64_t(running_.size());
  publish_queue();
  for (Sequence& s : finished) {
    if (!s.error.empty()) s.gen->fail(s.error);
    else s.gen->complete(metrics_, s.cancelled);
  }
}

}  // namespace m3::server
