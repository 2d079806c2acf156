#pragma once
// The BPE model of tokenizer.json ("model": {"type": "BPE", ...}) working on raw bytes: the
// vocabulary is stored GPT-2-mapped in the file and un-mapped once at load time, so encoding
// never builds mapped strings.
#include <array>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace m3::tok {

// Hashes std::string and std::string_view alike, so lookups by view need no temporary string.
struct TransparentStringHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};
template <typename V>
using StringMap = std::unordered_map<std::string, V, TransparentStringHash, std::equal_to<>>;

// Results for words seen before. Encoding is const and may run on several threads, so the
// cache is split into independently locked shards; a full shard is simply emptied.
class WordCache {
 public:
  // Appends the cached ids of `word` to `out`; false when not cached.
  bool lookup(std::string_view word, std::vector<int32_t>& out) const;
  void store(std::string_view word, const std::vector<int32_t>& ids) const;

  static constexpr size_t kMaxWordBytes = 256;  // longer words are rare; don't let them evict

 private:
  static constexpr size_t kShards = 16;
  static constexpr size_t kMaxEntriesPerShard = 8192;
  struct Shard {
    std::mutex mu;
    StringMap<std::vector<int32_t>> map;
  };
  mutable std::array<Shard, kShards> shards_;
};

class BpeModel {
 public:
  // Parses "model". `source` names the file for error messages. Throws m3::Error naming the
  // field (model.vocab, model.merges[i], ...).
  static BpeModel from_json(const nlohmann::json& model, const std::string& source);

  // Appends the ids of one pre-tokenized piece (raw bytes).
  void encode_word(std::string_view word, std::vector<int32_t>& out) const;

  // Largest vocabulary id + 1.
  int32_t id_limit() const { return static_cast<int32_t>(id_to_bytes_.size()); }
  // Raw bytes of a vocabulary id; null for ids the vocabulary does not define.
  const std::string* bytes_of(int32_t id) const;

 private:
  struct Merge {
    int32_t rank;    // position in model.merges: lower merges first
    int32_t new_id;  // the token the pair becomes
  };
  static uint64_t pair_key(int32_t a, int32_t b) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b);
  }
  void merge_word(std::string_view word, std::vector<int32_t>& out) const;
  int32_t byte_id(uint8_t byte) const;

  std::vector<std::string> id_to_bytes_;
  std::vector<bool> id_defined_;
  StringMap<int32_t> bytes_to_id_;
  std::array<int32_t, 256> byte_ids_{};  // id of each single byte, -1 if the vocab lacks it
  std::unordered_map<uint64_t, Merge> merges_;
  bool ignore_merges_ = false;  // a word that is itself a vocabulary entry is taken whole
  int32_t unk_id_ = -1;         // for bytes without a token, when unk_token is set
  std::shared_ptr<WordCache> cache_ = std::make_shared<WordCache>();
};

}  // namespace m3::tok
