#include "tokenizer/bpe_model.h"

#include <cstdio>
#include <functional>
#include <queue>

#include <nlohmann/json.hpp>

#include "m3/error.h"
#include "tokenizer/byte_level.h"
#include "tokenizer/json_field.h"

namespace m3::tok {

// ---- cache ----

bool WordCache::lookup(std::string_view word, std::vector<int32_t>& out) const {
  Shard& shard = shards_[std::hash<std::string_view>{}(word) % kShards];
  std::lock_guard<std::mutex> lock(shard.mu);
  auto it = shard.map.find(word);
  if (it == shard.map.end()) return false;
  out.insert(out.end(), it->second.begin(), it->second.end());
  return true;
}

void WordCache::store(std::string_view word, const std::vector<int32_t>& ids) const {
  Shard& shard = shards_[std::hash<std::string_view>{}(word) % kShards];
  std::lock_guard<std::mutex> lock(shard.mu);
  if (shard.map.size() >= kMaxEntriesPerShard) shard.map.clear();
  shard.map.emplace(std::string(word), ids);
}

// ---- loading ----

namespace {

// Checks options of HF's BPE that a byte-level vocabulary must leave off.
void check_unsupported_options(const nlohmann::json& model, const std::string& where) {
  if (const auto* t = find_field(model, "type")) {
    M3_CHECK(t->is_string() && t->get<std::string>() == "BPE", where, ".type: \"",
             t->is_string() ? t->get<std::string>() : t->dump(), "\" is not supported (only \"BPE\")");
  }
  if (const auto* d = find_field(model, "dropout")) {
    M3_CHECK(d->is_number() && d->get<double>() == 0.0, where, ".dropout: BPE dropout is not supported (expected null)");
  }
  for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"}) {
    if (const auto* v = find_field(model, key)) {
      M3_CHECK(v->is_string() && v->get<std::string>().empty(), where, ".", key,
               ": not supported for byte-level BPE (expected null)");
    }
  }
  if (const auto* b = find_field(model, "byte_fallback")) {
    M3_CHECK(b->is_boolean(), where, ".byte_fallback: expected true or false");
    M3_CHECK(!b->get<bool>(), where, ".byte_fallback: true is not supported (byte-level BPE needs no fallback)");
  }
}

// One entry of model.merges, either "a b" (older files) or ["a", "b"] (tokenizers >= 0.20).
// `where` + index name the entry in errors (built only on failure: this runs 200k times).
std::pair<std::string, std::string> parse_merge(const nlohmann::json& entry, const std::string& where, size_t index) {
  if (entry.is_string()) {
    const std::string& s = entry.get_ref<const std::string&>();
    size_t space = s.find(' ');
    M3_CHECK(space != std::string::npos && s.find(' ', space + 1) == std::string::npos && space > 0 &&
                 space + 1 < s.size(),
             where, ".merges[", index, "]: expected \"left right\" with exactly one space, got \"", s, "\"");
    return {s.substr(0, space), s.substr(space + 1)};
  }
  M3_CHECK(entry.is_array() && entry.size() == 2 && entry[0].is_string() && entry[1].is_string(), where, ".merges[",
           index, "]: expected \"left right\" or [\"left\", \"right\"]");
  return {entry[0].get<std::string>(), entry[1].get<std::string>()};
}

}  // namespace

BpeModel BpeModel::from_json(const nlohmann::json& model, const std::string& source) {
  const std::string where = source + ": model";
  M3_CHECK(model.is_object(), where, ": expected an object");
  check_unsupported_options(model, where);

  const nlohmann::json* vocab = find_field(model, "vocab");
  M3_CHECK(vocab != nullptr && vocab->is_object(), where, ".vocab: missing (expected {token: id})");
  const nlohmann::json* merges = find_field(model, "merges");
  M3_CHECK(merges != nullptr && merges->is_array(), where, ".merges: missing (expected an array)");

  BpeModel m;
  m.byte_ids_.fill(-1);
  // Vocabulary text as written in the file -> id, for resolving merges by name.
  std::unordered_map<std::string, int32_t> text_to_id;
  text_to_id.reserve(vocab->size());
  for (const auto& [text, id_json] : vocab->items()) {
    M3_CHECK(id_json.is_number_integer() && id_json.get<int64_t>() >= 0 && id_json.get<int64_t>() < (1 << 30),
             where, ".vocab: id of \"", text, "\" must be a non-negative integer");
    const int32_t id = id_json.get<int32_t>();
    if (static_cast<size_t>(id) >= m.id_to_bytes_.size()) {
      m.id_to_bytes_.resize(id + 1);
      m.id_defined_.resize(id + 1, false);
    }
    M3_CHECK(!m.id_defined_[id], where, ".vocab: id ", id, " is used twice (\"", text, "\")");
    // A token that is not GPT-2-mapped text can never come out of bytes; HF's decoder then
    // falls back to the token's own UTF-8, and so do we.
    std::string bytes = unicode_to_bytes(text).value_or(text);
    if (bytes.size() == 1) m.byte_ids_[static_cast<uint8_t>(bytes[0])] = id;
    m.bytes_to_id_.emplace(bytes, id);
    m.id_to_bytes_[id] = std::move(bytes);
    m.id_defined_[id] = true;
    text_to_id.emplace(text, id);
  }

  const auto lookup = [&](const std::string& text, size_t index) {
    auto it = text_to_id.find(text);
    M3_CHECK(it != text_to_id.end(), where, ".merges[", index, "]: token \"", text, "\" is not in model.vocab");
    return it->second;
  };
  m.merges_.reserve(merges->size());
  for (size_t i = 0; i < merges->size(); ++i) {
    auto [left, right] = parse_merge((*merges)[i], where, i);
    const int32_t a = lookup(left, i), b = lookup(right, i);
    const int32_t merged = lookup(left + right, i);
    // A pair listed twice keeps the later rank, as HF's map built from the list does.
    m.merges_[pair_key(a, b)] = Merge{static_cast<int32_t>(i), merged};
  }

  if (const auto* unk = find_field(model, "unk_token")) {
    M3_CHECK(unk->is_string(), where, ".unk_token: expected a string or null");
    if (auto it = text_to_id.find(unk->get<std::string>()); it != text_to_id.end()) m.unk_id_ = it->second;
  }
  if (const auto* im = find_field(model, "ignore_merges")) {
    M3_CHECK(im->is_boolean(), where, ".ignore_merges: expected true or false");
    m.ignore_merges_ = im->get<bool>();
  }
  return m;
}

const std::string* BpeModel::bytes_of(int32_t id) const {
  if (id < 0 || id >= id_limit() || !id_defined_[id]) return nullptr;
  return &id_to_bytes_[id];
}

// ---- encoding ----

int32_t BpeModel::byte_id(uint8_t byte) const {
  int32_t id = byte_ids_[byte];
  if (id >= 0) return id;
  if (unk_id_ >= 0) return unk_id_;
  char hex[8];
  std::snprintf(hex, sizeof hex, "0x%02X", byte);
  fail("tokenizer: byte ", hex, " has no token in model.vocab (and no unk_token is set)");
}

void BpeModel::encode_word(std::string_view word, std::vector<int32_t>& out) const {
  if (word.empty()) return;
  if (word.size() == 1) {
    out.push_back(byte_id(static_cast<uint8_t>(word[0])));
    return;
  }
  if (ignore_merges_) {
    if (auto it = bytes_to_id_.find(word); it != bytes_to_id_.end()) {
      out.push_back(it->second);
      return;
    }
  }
  const bool cacheable = word.size() <= WordCache::kMaxWordBytes;
  if (cacheable && cache_->lookup(word, out)) return;
  std::vector<int32_t> ids;
  merge_word(word, ids);
  if (cacheable) cache_->store(word, ids);
  out.insert(out.end(), ids.begin(), ids.end());
}

// Classic BPE on a doubly linked list of symbols: always apply the adjacent pair with the
// lowest merge rank, the leftmost one among equals (HF tokenizers' and tiktoken's order).
// A min-heap of candidate pairs makes this O(n log n); entries made stale by an earlier merge
// are recognised on pop because the symbols at that position no longer hold the same ids.
void BpeModel::merge_word(std::string_view word, std::vector<int32_t>& out) const {
  struct Symbol {
    int32_t id, prev, next;
  };
  struct Candidate {
    int32_t rank, pos, left_id, right_id, new_id;
    bool operator>(const Candidate& o) const { return rank != o.rank ? rank > o.rank : pos > o.pos; }
  };
  const int32_t n = static_cast<int32_t>(word.size());
  std::vector<Symbol> sym(n);
  for (int32_t i = 0; i < n; ++i) sym[i] = {byte_id(static_cast<uint8_t>(word[i])), i - 1, i + 1 < n ? i + 1 : -1};

  std::priority_queue<Candidate, std::vector<Candidate>, std::greater<Candidate>> heap;
  const auto push_pair = [&](int32_t pos) {
    if (pos < 0 || sym[pos].next < 0) return;
    const int32_t l = sym[pos].id, r = sym[sym[pos].next].id;
    auto it = merges_.find(pair_key(l, r));
    if (it != merges_.end()) heap.push({it->second.rank, pos, l, r, it->second.new_id});
  };
  for (int32_t i = 0; i + 1 < n; ++i) push_pair(i);

  while (!heap.empty()) {
    const Candidate c = heap.top();
    heap.pop();
    Symbol& left = sym[c.pos];
    if (left.id != c.left_id || left.next < 0 || sym[left.next].id != c.right_id) continue;  // stale
    const int32_t right_pos = left.next;
    left.id = c.new_id;
    left.next = sym[right_pos].next;
    if (left.next >= 0) sym[left.next].prev = c.pos;
    sym[right_pos].id = -1;  // dead: never matches a candidate again
    push_pair(left.prev);
    push_pair(c.pos);
  }
  out.clear();
  for (int32_t pos = 0; pos >= 0; pos = sym[pos].next) out.push_back(sym[pos].id);
}

}  // namespace m3::tok
