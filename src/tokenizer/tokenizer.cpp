// Tokenizer: tokenizer.json -> (added tokens, pre-tokenizer, BPE model), and encode/decode.
#include "m3/tokenizer.h"

#include <algorithm>
#include <fstream>
#include <sstream>
#include <unordered_map>

#include <nlohmann/json.hpp>

#include "base/read_file.h"
#include "m3/error.h"
#include "tokenizer/added_tokens.h"
#include "tokenizer/bpe_model.h"
#include "tokenizer/regex_split.h"

namespace m3 {

struct Tokenizer::Impl {
  tok::BpeModel model;
  tok::PreTokenizer pre_tokenizer;
  tok::AddedTokenMatcher added;
  std::unordered_map<std::string, int32_t> added_by_content;
  std::unordered_map<int32_t, const tok::AddedToken*> added_by_id;
  int32_t vocab_size = 0;

  // `pieces` is scratch space, reused across the segments of one encode call.
  void encode_text(std::string_view text, tok::Pieces& pieces, std::vector<int32_t>& out) const;
};

namespace {

const nlohmann::json* find_field(const nlohmann::json& obj, const char* key) {
  auto it = obj.find(key);
  return it == obj.end() || it->is_null() ? nullptr : &*it;
}

std::string type_of(const nlohmann::json& node) {
  auto it = node.find("type");
  return it != node.end() && it->is_string() ? it->get<std::string>() : node.dump();
}

// Normalization would change the text before splitting; byte-level BPE tokenizers have none.
void check_normalizer(const nlohmann::json& root, const std::string& source) {
  if (const auto* n = find_field(root, "normalizer")) {
    fail(source, ": normalizer: \"", type_of(*n), "\" is not supported (only null)");
  }
}

// The decoder must turn tokens back into their bytes, which is what ByteLevel does; we decode
// from the un-mapped bytes directly, so there is nothing else to configure.
void check_decoder(const nlohmann::json& root, const std::string& source) {
  const auto* d = find_field(root, "decoder");
  M3_CHECK(d != nullptr, source, ": decoder: missing (expected {\"type\": \"ByteLevel\"})");
  M3_CHECK(d->is_object() && type_of(*d) == "ByteLevel", source, ": decoder: \"", type_of(*d),
           "\" is not supported (only ByteLevel)");
}

}  // namespace

Tokenizer::Tokenizer() : impl_(std::make_unique<Impl>()) {}
Tokenizer::~Tokenizer() = default;

std::unique_ptr<Tokenizer> Tokenizer::from_file(const std::string& path) {
  return from_json_text(read_whole_file(path, "a tokenizer file"), path);
}

// post_processor, truncation and padding are ignored on purpose: we never add tokens on our own
// (the chat template writes BOS/role tokens itself, spec §6) and never truncate or pad.
std::unique_ptr<Tokenizer> Tokenizer::from_json_text(const std::string& text, const std::string& source) {
  nlohmann::json root;
  try {
    root = nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {  // parse_error, and out_of_range for a number past double's range
    fail(source, ": not valid JSON: ", e.what());
  }
  M3_CHECK(root.is_object(), source, ": expected a JSON object at the top level");
  const auto* model = find_field(root, "model");
  M3_CHECK(model != nullptr, source, ": model: missing (expected the BPE model object)");
  check_normalizer(root, source);
  check_decoder(root, source);

  std::unique_ptr<Tokenizer> tok(new Tokenizer());
  Impl& impl = *tok->impl_;
  impl.model = tok::BpeModel::from_json(*model, source);
  auto pre = root.find("pre_tokenizer");
  impl.pre_tokenizer = tok::PreTokenizer::from_json(pre == root.end() ? nlohmann::json() : *pre, source);
  auto added = root.find("added_tokens");
  impl.added = tok::AddedTokenMatcher::from_json(added == root.end() ? nlohmann::json() : *added, source);

  impl.vocab_size = impl.model.id_limit();
  for (const tok::AddedToken& t : impl.added.tokens()) {
    impl.added_by_content.emplace(t.content, t.id);
    impl.added_by_id.emplace(t.id, &t);
    impl.vocab_size = std::max(impl.vocab_size, t.id + 1);
  }
  return tok;
}

void Tokenizer::Impl::encode_text(std::string_view text, tok::Pieces& pieces, std::vector<int32_t>& out) const {
  pre_tokenizer.run(text, pieces);
  for (std::string_view piece : pieces.views) model.encode_word(piece, out);
}

std::vector<int32_t> Tokenizer::encode(std::string_view text, bool allow_special) const {
  std::vector<int32_t> ids;
  ids.reserve(text.size() / 3 + 1);
  // Added tokens first: the text between two of them is pre-tokenized on its own, so the split
  // regex never sees across a control token (HF does the same).
  tok::Pieces pieces;
  size_t pos = 0;
  const bool scan = impl_->added.any(allow_special);
  tok::AddedTokenMatcher::Match match;
  while (true) {
    const bool found = scan && impl_->added.find(text, pos, allow_special, match);
    const size_t segment_end = found ? match.begin : text.size();
    impl_->encode_text(text.substr(pos, segment_end - pos), pieces, ids);
    if (!found) break;
    ids.push_back(match.id);
    pos = match.end;
  }
  return ids;
}

std::string Tokenizer::token_bytes(int32_t id) const {
  // Added tokens win over a vocabulary entry with the same id, as in HF.
  if (auto it = impl_->added_by_id.find(id); it != impl_->added_by_id.end()) return it->second->content;
  const std::string* bytes = impl_->model.bytes_of(id);
  M3_CHECK(bytes != nullptr, "token id ", id, " is not in the vocabulary (size ", impl_->vocab_size, ")");
  return *bytes;
}

std::string Tokenizer::decode(const std::vector<int32_t>& ids, bool skip_special) const {
  std::string out;
  for (int32_t id : ids) {
    if (skip_special && is_special(id)) continue;
    out += token_bytes(id);
  }
  return out;
}

std::optional<int32_t> Tokenizer::token_id(std::string_view content) const {
  auto it = impl_->added_by_content.find(std::string(content));
  if (it == impl_->added_by_content.end()) return std::nullopt;
  return it->second;
}

int32_t Tokenizer::require_token(std::string_view content) const {
  auto id = token_id(content);
  M3_CHECK(id.has_value(), "tokenizer.json has no added token \"", content, "\"");
  return *id;
}

bool Tokenizer::is_special(int32_t id) const {
  auto it = impl_->added_by_id.find(id);
  return it != impl_->added_by_id.end() && it->second->special;
}

bool Tokenizer::has_token(int32_t id) const {
  return impl_->added_by_id.count(id) > 0 || impl_->model.bytes_of(id) != nullptr;
}

int32_t Tokenizer::vocab_size() const { return impl_->vocab_size; }

}  // namespace m3
