#pragma once
// Shared by the harnesses: the small tokenizer, a scratch file for readers that take a path, and
// a reader that splits an input into control bytes and payload.
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <string_view>

#include "m3/error.h"
#include "fixtures/bpe_trainer.h"
#include "m3/tokenizer.h"

namespace m3::fuzz {

// The tokenizer `m3 make-checkpoint` ships (byte-level BPE + every M3 added token), built once per
// process: real special-token handling at a size that keeps each execution fast.
inline const Tokenizer& small_tokenizer() {
  static const std::unique_ptr<Tokenizer> tok =
      Tokenizer::from_json_text(make_small_tokenizer_json(300), "fuzz tokenizer.json");
  return *tok;
}

// A file in /dev/shm (memory, no disk wear at thousands of writes a second), one per process so
// that parallel fuzzing jobs (-jobs=N) do not overwrite each other's input.
class ScratchFile {
 public:
  explicit ScratchFile(std::string_view suffix)
      : path_("/dev/shm/m3-fuzz-" + std::to_string(getpid()) + std::string(suffix)) {}
  ~ScratchFile() { std::remove(path_.c_str()); }
  ScratchFile(const ScratchFile&) = delete;
  ScratchFile& operator=(const ScratchFile&) = delete;

  // Replaces the file's contents; a failure here is the machine's, not the input's: abort loudly.
  const std::string& write(const uint8_t* data, size_t size) {
    FILE* f = std::fopen(path_.c_str(), "wb");
    if (!f || (size && std::fwrite(data, 1, size, f) != size) || std::fclose(f) != 0) {
      std::perror(path_.c_str());
      std::abort();
    }
    return path_;
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// Reads control bytes off the front of an input; past the end it yields zeros, so every input,
// however short, is a valid command.
class ByteReader {
 public:
  ByteReader(const uint8_t* data, size_t size) : data_(data), size_(size) {}
  uint8_t byte() { return pos_ < size_ ? data_[pos_++] : 0; }
  // Everything not yet read.
  std::string_view rest() const {
    return {reinterpret_cast<const char*>(data_) + pos_, size_ - std::min(pos_, size_)};
  }

 private:
  const uint8_t* data_;
  size_t size_;
  size_t pos_ = 0;
};

// A finding that no sanitizer reports (a broken invariant): print why and abort, so libFuzzer
// saves the input as a crash.
[[noreturn]] inline void finding(const std::string& what) {
  std::fprintf(stderr, "fuzz finding: %s\n", what.c_str());
  std::abort();
}

}  // namespace m3::fuzz
