#pragma once
// Byte-level BPE as Hugging Face `tokenizers` does it, loaded from tokenizer.json:
// added tokens are matched first, then the Split pre-tokenizer regex (PCRE2, Unicode classes),
// the GPT-2 byte<->unicode mapping, and rank-ordered merges.
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace m3 {

class Tokenizer {
 public:
  static std::unique_ptr<Tokenizer> from_file(const std::string& tokenizer_json_path);
  static std::unique_ptr<Tokenizer> from_json_text(const std::string& text, const std::string& source_name);
  ~Tokenizer();

  // Plain text: special-token strings inside `text` stay ordinary text (e.g. "]~b]" is encoded
  // byte by byte) unless allow_special is true, in which case added tokens are matched first.
  std::vector<int32_t> encode(std::string_view text, bool allow_special = false) const;
  // Concatenated bytes of the tokens (special tokens included as their text unless skip_special).
  std::string decode(const std::vector<int32_t>& ids, bool skip_special = false) const;

  // Id of an added/special token by its exact content, e.g. "[e~[" (end of turn).
  std::optional<int32_t> token_id(std::string_view content) const;
  // Throws m3::Error naming the token when tokenizer.json lacks it.
  int32_t require_token(std::string_view content) const;
  bool is_special(int32_t id) const;
  // Whether the id stands for a token (a vocabulary may leave ids unused below vocab_size()).
  bool has_token(int32_t id) const;
  // Largest id + 1 over the vocabulary and added tokens.
  int32_t vocab_size() const;
  // The raw bytes one token stands for (its text for added tokens).
  std::string token_bytes(int32_t id) const;

 private:
  Tokenizer();
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// Turns a stream of ids into text pieces that are always whole UTF-8 characters: bytes of a
// character split across tokens are held back until it completes (or flushed at the end).
// Bytes that can never complete a character come out as U+FFFD at once, so every piece
// returned is valid UTF-8.
class StreamingDecoder {
 public:
  explicit StreamingDecoder(const Tokenizer& tok, bool skip_special = false);
  std::string push(int32_t id);  // complete UTF-8 text now available (may be empty)
  std::string flush();           // whatever remains (invalid bytes become U+FFFD)

 private:
  const Tokenizer& tok_;
  bool skip_special_;
  std::string pending_;
};

}  // namespace m3
