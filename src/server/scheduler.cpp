#include "server/scheduler.h"

#include <algorithm>

#include "m3/error.h"

namespace m3::server {

namespace {

BatchOptions batch_options(const SchedulerOptions& o) {
  M3_CHECK(o.parallel >= 1, "--parallel must be >= 1, got ", o.parallel);
  M3_CHECK(o.chunk >= o.parallel, "--chunk (", o.chunk, ") must be at least --parallel (", o.parallel, ")");
  BatchOptions b;
  b.chunk = o.chunk;
  b.cache_type = o.cache_type;
  b.prefix_cache_bytes = o.prefix_cache_bytes;
  return b;
}

}  // namespace

Scheduler::Scheduler(Engine& engine, Metrics& metrics, SchedulerOptions options)
    : engine_(engine), metrics_(metrics), opt_(options), batch_(engine, batch_options(options)) {
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

void Scheduler::abort_all() {
  {
    std::lock_guard<std::mutex> lk(mu_);
    abort_ = true;
  }
  cv_.notify_all();
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
    bool aborting = false;
    {
      std::unique_lock<std::mutex> lk(mu_);
      cv_.wait(lk, [&] { return stop_ || !queue_.empty() || !running_.empty(); });
      if (stop_) break;
      aborting = abort_;
      if (aborting) {
        arrivals.swap(queue_);
      } else {
        const size_t free_slots = size_t(opt_.parallel) - running_.size();
        while (!queue_.empty() && arrivals.size() < free_slots) {
          arrivals.push_back(std::move(queue_.front()));
          queue_.pop_front();
        }
      }
    }
    if (aborting) {  // shutdown: every request ends now, with its final event
      for (Sequence& s : running_) {
        if (s.id >= 0) batch_.finish(s.id, s.gen->cached_tokens());
        s.gen->abort_for_shutdown();
      }
      running_.clear();
      for (auto& g : arrivals) g->abort_for_shutdown();
      running_count_ = 0;
      publish_queue();
      continue;
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
    int64_t reused = 0;
    s.id = batch_.add(s.gen->job().prompt, &reused);
    if (s.waits_for_leader) s.gen->set_reused(reused);  // started when it began to wait
    else s.gen->start(reused);
    return true;
  } catch (const std::exception& e) {
    s.error = e.what();
    return false;
  }
}

const Scheduler::Sequence* Scheduler::leader_in_prefill(const Generation& gen) const {
  if (!gen.group() || gen.index() == 0) return nullptr;
  for (const Sequence& s : running_)
    if (s.gen->group() == gen.group() && s.gen->index() == 0 && s.id >= 0 && !s.done && batch_.prefilling(s.id))
      return &s;
  return nullptr;
}

void Scheduler::advance(Sequence& s) {
  std::vector<int32_t> feed;
  try {
    if (!s.gen->step(batch_.logits(s.id), feed)) {
      s.done = true;
      return;
    }
  } catch (const std::exception& e) {  // sampling or output handling failed: only this sequence ends
    s.error = e.what();
    batch_.drop(s.id);
    s.id = -1;
    s.done = true;
    return;
  }
  batch_.feed(s.id, std::move(feed));
}

void Scheduler::run_step() {
  const Batch::StepResult r = batch_.step();
  if (r.sequences == 0) return;
  metrics_.count_step(r.sequences, r.rows);
  auto owner = [&](Batch::Id id) -> Sequence* {
    for (Sequence& s : running_)
      if (s.id == id) return &s;
    return nullptr;
  };
  for (Batch::Id id : r.failed) {  // their caches' contents were unknown: the batch dropped them
    Sequence* s = owner(id);
    if (!s) continue;
    s->error = r.error;
    s->id = -1;
    s->done = true;
  }
  for (Batch::Id id : r.ready) {
    Sequence* sp = owner(id);
    if (!sp) continue;
    Sequence& s = *sp;
    if (s.gen->group() && s.gen->index() == 0) {
      // The leader's prompt may be in now: its waiting siblings share its pages and start from its logits.
      for (Sequence& f : running_) {
        if (!f.waits_for_leader || f.done || f.gen->group() != s.gen->group()) continue;
        f.waits_for_leader = false;
        try {
          f.id = batch_.fork(s.id);
        } catch (const std::exception& e) {
          f.error = e.what();
          f.done = true;
          continue;
        }
        f.gen->set_reused(batch_.length(s.id));
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
    if (s.id < 0) continue;
    // A sequence cancelled during its prefill holds only part of the prompt (finish keeps what it holds).
    batch_.finish(s.id, s.gen->cached_tokens());
    s.id = -1;
  }
  metrics_.set_prefix_cache(int64_t(batch_.prefix_cache_entries()), batch_.prefix_cache_bytes());
  running_count_ = int64_t(running_.size());
  publish_queue();
  for (Sequence& s : finished) {
    if (!s.error.empty()) s.gen->fail(s.error);
    else s.gen->complete(metrics_, s.cancelled);
  }
}

}  // namespace m3::server
