#include "m3/batch.h"

#include <algorithm>
#include <map>

#include "m3/error.h"
#include "m3/prompt.h"
#include "runtime/engine.h"
#include "runtime/prefix_cache.h"

namespace m3 {

namespace {

KvCacheShape shape_of(const Engine& engine, DType type) {
  M3_CHECK(type == DType::F32 || type == DType::BF16 || type == DType::F8_E4M3, "cache type must be f32, bf16 or fp8, got ",
           dtype_name(type));
  KvCacheShape shape = engine.model().cache_shape();
  shape.dtype = type;
  return shape;
}

}  // namespace

struct Batch::Impl {
  struct Sequence {
    std::unique_ptr<KvCache> cache;
    const Prompt* prompt = nullptr;  // nullptr for a fork (its prompt is in the cache already)
    int64_t reused = 0;              // pending[0] is prompt position `reused` while prefilling
    std::vector<int32_t> pending;    // the prompt's uncached rest, then each step's feed
    size_t fed = 0;                  // of pending
    bool prefilling = true;
    std::vector<float> rows;         // input rows of this step's chunk (a prompt with media)
    std::vector<float> logits;       // the last row's, or with all_logits every row's of the last step
    SequenceOptions options;
    int64_t logits_rows = 0;
  };

  Impl(Engine& e, const BatchOptions& o)
      : engine(e), opt(o), prefix(shape_of(e, o.cache_type), o.prefix_cache_bytes, o.prefix_cache_entries) {
    M3_CHECK(opt.chunk > 0, "batch chunk must be > 0, got ", opt.chunk);
  }

  Sequence& at(Id id) {
    auto it = seqs.find(id);
    M3_CHECK(it != seqs.end(), "batch: no sequence ", id);
    return it->second;
  }

  Engine& engine;
  BatchOptions opt;
  PrefixCache prefix;
  std::map<Id, Sequence> seqs;  // by id: the order they were added
  Id next_id = 0;
};

Batch::Batch(Engine& engine, BatchOptions options) : impl_(std::make_unique<Impl>(engine, options)) {}
Batch::~Batch() = default;

Batch::Id Batch::add(const Prompt& prompt, int64_t* reused, SequenceOptions options) {
  M3_CHECK(!prompt.empty(), "batch: empty prompt");
  PrefixCache::Lease lease = impl_->prefix.acquire(prompt.keys());
  Impl::Sequence s;
  s.cache = std::move(lease.cache);
  s.prompt = &prompt;
  s.reused = lease.reused;
  s.options = options;
  s.pending.assign(prompt.ids().begin() + lease.reused, prompt.ids().end());
  if (reused) *reused = lease.reused;
  const Id id = impl_->next_id++;
  impl_->seqs.emplace(id, std::move(s));
  return id;
}

Batch::Id Batch::fork(Id leader) {
  Impl::Sequence& l = impl_->at(leader);
  M3_CHECK(!l.prefilling, "batch: sequence ", leader, " is still in its prompt");
  Impl::Sequence s;
  s.cache = KvCache::prefix_of(*l.cache, l.cache->length());
  s.prefilling = false;
  const float* last = logits(leader);
  s.logits.assign(last, last + impl_->engine.info().vocab_size);
  const Id id = impl_->next_id++;
  impl_->seqs.emplace(id, std::move(s));
  return id;
}

bool Batch::prefilling(Id id) const { return impl_->at(id).prefilling; }

int64_t Batch::prefilled(Id id) const {
  const Impl::Sequence& s = impl_->at(id);
  return s.prefilling ? int64_t(s.fed) : (s.prompt ? s.prompt->size() - s.reused : 0);
}

int64_t Batch::length(Id id) const { return impl_->at(id).cache->length(); }

void Batch::feed(Id id, std::vector<int32_t> tokens) {
  Impl::Sequence& s = impl_->at(id);
  M3_CHECK(!s.prefilling, "batch: sequence ", id, " is still in its prompt");
  s.pending = std::move(tokens);
  s.fed = 0;
}

Batch::StepResult Batch::step() {
  Impl& m = *impl_;
  const int64_t H = m.engine.info().hidden_size;
  std::vector<BatchInput> inputs;
  std::vector<Id> owner;
  int64_t budget = m.opt.chunk;
  auto add = [&](Id id, Impl::Sequence& s, int64_t n) {
    const bool last = s.fed + size_t(n) == s.pending.size();
    const LogitsFor which = s.options.all_logits ? LogitsFor::All : last ? LogitsFor::Last : LogitsFor::None;
    BatchInput in{s.cache.get(), s.pending.data() + s.fed, nullptr, n, which, &s.logits};
    const int64_t at = s.reused + int64_t(s.fed);
    if (s.prefilling && s.prompt->has_media_from(at)) {  // a prompt with images goes in as input rows
      s.rows.resize(size_t(n * H));
      s.prompt->input_rows(m.engine.model(), at, n, s.rows.data());
      in.tokens = nullptr;
      in.embeddings = s.rows.data();
    }
    inputs.push_back(in);
    owner.push_back(id);
    budget -= n;
  };
  for (auto& [id, s] : m.seqs)  // decode rows: one token each, or a few forced ones
    if (!s.prefilling && s.fed < s.pending.size()) add(id, s, int64_t(s.pending.size() - s.fed));
  for (auto& [id, s] : m.seqs) {
    if (budget <= 0) break;
    if (!s.prefilling) continue;
    int64_t n = std::min(int64_t(s.pending.size() - s.fed), budget);
    if (s.options.max_rows > 0) n = std::min<int64_t>(n, s.options.max_rows);
    add(id, s, n);
  }
  StepResult r;
  if (inputs.empty()) return r;
  r.sequences = int64_t(inputs.size());
  for (const BatchInput& in : inputs) r.rows += in.n;
  try {
    m.engine.model().forward_batch(inputs);
  } catch (const std::exception& e) {
    // Their caches' contents are unknown: the sequences end and the caches are dropped.
    r.failed = owner;
    r.error = e.what();
    for (Id id : owner) m.seqs.erase(id);
    return r;
  }
  for (size_t k = 0; k < inputs.size(); ++k) {
    Impl::Sequence& s = m.seqs.at(owner[k]);
    s.fed += size_t(inputs[k].n);
    s.logits_rows = inputs[k].which == LogitsFor::All ? inputs[k].n : 1;
    if (s.fed < s.pending.size()) continue;  // the prompt goes on
    if (s.prefilling) {
      s.prefilling = false;
      s.rows = {};
    }
    r.ready.push_back(owner[k]);
  }
  return r;
}

const float* Batch::logits(Id id) const {
  const Impl::Sequence& s = impl_->at(id);
  const int64_t V = impl_->engine.info().vocab_size;
  return s.logits.data() + (s.options.all_logits ? (s.logits_rows - 1) * V : 0);
}

const float* Batch::all_logits(Id id) const {
  const Impl::Sequence& s = impl_->at(id);
  M3_CHECK(s.options.all_logits, "batch: sequence ", id, " keeps only its last logits");
  return s.logits.data();
}

int64_t Batch::all_logits_rows(Id id) const { return impl_->at(id).logits_rows; }

void Batch::set_max_rows(Id id, int max_rows) { impl_->at(id).options.max_rows = max_rows; }

void Batch::finish(Id id, std::vector<int32_t> keys) {
  Impl::Sequence& s = impl_->at(id);
  std::unique_ptr<KvCache> cache = std::move(s.cache);
  impl_->seqs.erase(id);
  if (int64_t(keys.size()) < cache->length()) cache->truncate(int64_t(keys.size()));
  keys.resize(size_t(cache->length()));
  impl_->prefix.release(std::move(cache), std::move(keys));
}

void Batch::drop(Id id) { impl_->seqs.erase(id); }

size_t Batch::size() const { return impl_->seqs.size(); }
bool Batch::contains(Id id) const { return impl_->seqs.count(id) > 0; }
size_t Batch::prefix_cache_entries() const { return impl_->prefix.entries(); }
uint64_t Batch::prefix_cache_bytes() const { return impl_->prefix.bytes(); }
void Batch::clear_prefix_cache() { impl_->prefix.clear(); }

}  // namespace m3
