#include "train/dataset.h"

#include <glob.h>

#include <algorithm>
#include <fstream>
#include <numeric>
#include <random>
#include <sstream>

#include <nlohmann/json.hpp>

#include "m3/error.h"
#include "base/read_file.h"

namespace m3::train {

namespace {

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// The documents of one file: the whole file, or one per JSONL line's "text".
std::vector<std::string> documents_of(const std::string& path) {
  const std::string text = read_whole_file(path, "training data");
  if (!ends_with(path, ".jsonl")) return {text};
  std::vector<std::string> docs;
  std::istringstream lines(text);
  std::string line;
  for (int64_t n = 1; std::getline(lines, line); ++n) {
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    nlohmann::json j;
    try {
      j = nlohmann::json::parse(line);
    } catch (const nlohmann::json::exception& e) {
      fail(path, ":", n, ": not a JSON line (", e.what(), ")");
    }
    M3_CHECK(j.is_object() && j.contains("text") && j["text"].is_string(), path, ":", n,
             ": expected an object with a string field \"text\"");
    docs.push_back(j["text"].get<std::string>());
  }
  return docs;
}

// A path, or the files a glob pattern matches (sorted); a pattern that matches nothing is an error.
std::vector<std::string> expand(const std::string& pattern) {
  if (pattern.find_first_of("*?[") == std::string::npos) return {pattern};
  glob_t g{};
  const int rc = glob(pattern.c_str(), 0, nullptr, &g);
  std::vector<std::string> out;
  for (size_t i = 0; rc == 0 && i < g.gl_pathc; ++i) out.push_back(g.gl_pathv[i]);
  globfree(&g);
  M3_CHECK(!out.empty(), "training data: the pattern ", pattern, " matches no file");
  return out;
}

}  // namespace

std::vector<std::string> read_documents(const std::vector<std::string>& files) {
  std::vector<std::string> docs;
  for (const std::string& f : files)
    for (const std::string& p : expand(f))
      for (std::string& d : documents_of(p)) docs.push_back(std::move(d));
  return docs;
}

TokenStreams tokenize_documents(const std::vector<std::string>& files, const Tokenizer& tokenizer, int32_t end_id,
                                double valid_fraction) {
  M3_CHECK(!files.empty(), "training data: no files given");
  M3_CHECK(valid_fraction >= 0.0 && valid_fraction < 1.0, "training data: valid_fraction ", valid_fraction,
           " is outside [0, 1)");
  TokenStreams out;
  std::vector<int32_t> all;
  for (const std::string& doc : read_documents(files)) {
    if (doc.empty()) continue;
    const std::vector<int32_t> ids = tokenizer.encode(doc);
    all.insert(all.end(), ids.begin(), ids.end());
    all.push_back(end_id);
    ++out.documents;
  }
  M3_CHECK(out.documents > 0, "training data: the files (", files.front(), files.size() > 1 ? ", ..." : "",
           ") hold no text");
  const size_t valid = size_t(double(all.size()) * valid_fraction);
  out.train.assign(all.begin(), all.end() - int64_t(valid));
  out.valid.assign(all.end() - int64_t(valid), all.end());
  return out;
}

WindowSampler::WindowSampler(const std::vector<int32_t>& stream, int64_t seq, uint64_t seed)
    : stream_(stream), seq_(seq), windows_(seq > 0 ? (int64_t(stream.size()) - 1) / seq : 0), seed_(seed) {
  M3_CHECK(seq > 0, "training data: sequence length must be positive");
  M3_CHECK(windows_ > 0, "training data: ", stream.size(), " tokens do not fill one window of ", seq + 1);
  shuffle();
}

void WindowSampler::shuffle() {
  order_.resize(static_cast<size_t>(windows_));
  std::iota(order_.begin(), order_.end(), int64_t(0));
  std::mt19937_64 rng(seed_ ^ (0x9E3779B97F4A7C15ull * uint64_t(epoch_ + 1)));
  std::shuffle(order_.begin(), order_.end(), rng);
}

void WindowSampler::window(int64_t i, int32_t* tokens, int32_t* targets) const {
  const int32_t* w = stream_.data() + i * seq_;
  std::copy_n(w, seq_, tokens);
  std::copy_n(w + 1, seq_, targets);
}

void WindowSampler::next(int32_t* tokens, int32_t* targets) {
  if (index_ == windows_) {
    ++epoch_;
    index_ = 0;
    shuffle();
  }
  window(order_[size_t(index_++)], tokens, targets);
}

void WindowSampler::seek(int64_t epoch, int64_t index) {
  M3_CHECK(epoch >= 0 && index >= 0 && index <= windows_, "training data: position (epoch ", epoch, ", window ", index,
           ") is outside the ", windows_, " windows");
  epoch_ = epoch;
  index_ = index;
  shuffle();
}

}  // namespace m3::train
