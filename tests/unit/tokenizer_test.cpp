// Byte-level BPE tokenizer: loading tokenizer.json, encode/decode, added tokens, streaming,
// invalid input, malformed files, and the built-in small tokenizer.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <algorithm>
#include <atomic>
#include <random>
#include <thread>

#include "m3/error.h"
#include "fixtures/bpe_trainer.h"
#include "tokenizer/byte_level.h"
#include "tokenizer/regex_split.h"
#include "m3/tokenizer.h"

namespace m3 {
namespace {

using nlohmann::json;

constexpr int kSmallMerges = 400;
constexpr int kM3AddedCount = 61;  // spec §6: ids 200000..200060

const std::string& small_json() {
  static const std::string text = make_small_tokenizer_json(kSmallMerges);
  return text;
}

const Tokenizer& small_tokenizer() {
  static const std::unique_ptr<Tokenizer> tok = Tokenizer::from_json_text(small_json(), "small tokenizer.json");
  return *tok;
}

int32_t base_vocab_size() { return 256 + kSmallMerges; }

// Expects `fn` to throw m3::Error whose message contains every one of `needles`.
template <typename Fn>
void expect_error(Fn&& fn, std::initializer_list<std::string> needles) {
  try {
    fn();
    ADD_FAILURE() << "expected m3::Error";
  } catch (const Error& e) {
    for (const std::string& n : needles) EXPECT_NE(std::string(e.what()).find(n), std::string::npos) << e.what();
  }
}

std::unique_ptr<Tokenizer> load(const json& j) { return Tokenizer::from_json_text(j.dump(), "test.json"); }

// A hand-made tokenizer: vocabulary `tokens` (raw bytes; ids in order), merges as pairs of
// token texts, and a pre-tokenizer (default: none, so the whole text is one word).
json handmade(const std::vector<std::string>& tokens, const std::vector<std::pair<std::string, std::string>>& merges,
              json pre_tokenizer = nullptr) {
  json vocab = json::object();
  for (size_t i = 0; i < tokens.size(); ++i) vocab[tok::bytes_to_unicode(tokens[i])] = i;
  json m = json::array();
  for (const auto& [a, b] : merges) m.push_back({tok::bytes_to_unicode(a), tok::bytes_to_unicode(b)});
  return json{{"version", "1.0"},
              {"added_tokens", json::array()},
              {"normalizer", nullptr},
              {"pre_tokenizer", pre_tokenizer},
              {"decoder", {{"type", "ByteLevel"}}},
              {"model", {{"type", "BPE"}, {"vocab", vocab}, {"merges", m}}}};
}

std::vector<std::string> texts_of(const Tokenizer& tok, const std::vector<int32_t>& ids) {
  std::vector<std::string> out;
  for (int32_t id : ids) out.push_back(tok.token_bytes(id));
  return out;
}

const std::vector<std::string>& varied_texts() {
  static const std::vector<std::string> texts = {
      "",
      "Hello, world!",
      "The quick brown fox jumps over the lazy dog. It's 2024-03-15; don't panic.",
      "I'M SURE YOU'RE RIGHT, they'll see. We've got 1,234,567 items @ $9.99 each.",
      "def f(x):\n    return x * 2  # double\n\n\nprint(f(21))\n",
      "   leading and trailing spaces   \t\t\n\r\n",
      "Москва, Ελληνικά, עברית, العربية, हिन्दी, 中文字符, 日本語のテキスト, 한국어",
      "Emoji 🙂👍🏽 👨‍👩‍👧 🇫🇷 ❤️ 1️⃣ e\u0301",
      "path/to/file/\nfoo!!!\n\n// comment\n",
      std::string(500, 'a') + " " + std::string(300, ' ') + "x",
      "<mm:think>not special here</mm:think> ]~b]user ]<]minimax[>[",
  };
  return texts;
}

// ---- round trips and the small tokenizer ----

TEST(Tokenizer, RoundTripsVariedText) {
  const Tokenizer& tok = small_tokenizer();
  for (const std::string& text : varied_texts()) {
    std::vector<int32_t> ids = tok.encode(text);
    EXPECT_EQ(tok.decode(ids), text);
    EXPECT_EQ(tok.decode(tok.encode(text, /*allow_special=*/true)), text);
    for (int32_t id : ids) {
      EXPECT_GE(id, 0);
      EXPECT_LT(id, base_vocab_size());
    }
  }
}

TEST(Tokenizer, MergesShortenCommonWords) {
  const Tokenizer& tok = small_tokenizer();
  // " the" is among the most frequent words of the sample; it must not stay as 4 bytes.
  EXPECT_LT(tok.encode(" the").size(), 4u);
  const std::string phrase = "The lighthouse keeper wrote in her logbook";
  EXPECT_LT(tok.encode(phrase).size(), phrase.size() / 2);
}

TEST(SmallTokenizer, LayoutFollowsSpec) {
  const Tokenizer& tok = small_tokenizer();
  EXPECT_EQ(tok.vocab_size(), base_vocab_size() + kM3AddedCount);
  EXPECT_EQ(tok.require_token("]!p~["), base_vocab_size());
  EXPECT_EQ(tok.require_token("]~b]"), base_vocab_size() + 19);
  EXPECT_EQ(tok.require_token("[e~["), base_vocab_size() + 20);
  EXPECT_EQ(tok.require_token("]<]image[>["), base_vocab_size() + 25);
  EXPECT_EQ(tok.require_token("]<]video[>["), base_vocab_size() + 26);
  EXPECT_EQ(tok.require_token("]<]start of image[>["), base_vocab_size() + 29);
  EXPECT_EQ(tok.require_token("]~!b["), base_vocab_size() + 34);
  EXPECT_EQ(tok.require_token("<tool_call>"), base_vocab_size() + 52);
  EXPECT_EQ(tok.require_token("]<]minimax[>["), base_vocab_size() + 58);
  EXPECT_EQ(tok.require_token("<mm:think>"), base_vocab_size() + 59);
  EXPECT_EQ(tok.require_token("</mm:think>"), base_vocab_size() + 60);
  for (int32_t id = base_vocab_size(); id < tok.vocab_size(); ++id) EXPECT_TRUE(tok.is_special(id)) << id;
  EXPECT_FALSE(tok.is_special(0));

  // Ids 0..255 are the bytes in GPT-2 order: '!' first, 'Ġ' (space) at 220, 'Ċ' (newline) at 198.
  EXPECT_EQ(tok.token_bytes(0), "!");
  EXPECT_EQ(tok.token_bytes(220), " ");
  EXPECT_EQ(tok.token_bytes(198), "\n");
  EXPECT_EQ(tok.token_bytes(188), std::string(1, '\0'));
  EXPECT_EQ(tok.token_bytes(187), "\xff");

  const json j = json::parse(small_json());
  EXPECT_EQ(j["model"]["merges"].size(), static_cast<size_t>(kSmallMerges));
  EXPECT_EQ(j["model"]["vocab"].size(), static_cast<size_t>(base_vocab_size()));
  EXPECT_EQ(j["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"], std::string(tok::kM3SplitPattern));
  EXPECT_EQ(j["added_tokens"].size(), static_cast<size_t>(kM3AddedCount));
}

TEST(SmallTokenizer, IsDeterministicAndPrefixConsistent) {
  EXPECT_EQ(make_small_tokenizer_json(kSmallMerges), small_json());
  // Fewer merges give a prefix of the same merge list.
  const json small = json::parse(make_small_tokenizer_json(50));
  const json full = json::parse(small_json());
  for (size_t i = 0; i < 50; ++i) EXPECT_EQ(small["model"]["merges"][i], full["model"]["merges"][i]);
  auto zero = Tokenizer::from_json_text(make_small_tokenizer_json(0), "zero");
  EXPECT_EQ(zero->vocab_size(), 256 + kM3AddedCount);
  EXPECT_EQ(zero->encode("abc").size(), 3u);
}

TEST(SmallTokenizer, TooManyMergesIsAnError) {
  expect_error([] { make_small_tokenizer_json(1000000); }, {"supports only"});
  expect_error([] { make_small_tokenizer_json(-1); }, {"num_merges"});
}

// ---- merges ----

TEST(Tokenizer, BothMergeEncodingsGiveSameIds) {
  json j = json::parse(small_json());
  json as_strings = json::array();
  for (const json& pair : j["model"]["merges"]) {
    as_strings.push_back(pair[0].get<std::string>() + " " + pair[1].get<std::string>());
  }
  j["model"]["merges"] = as_strings;
  auto legacy = load(j);
  for (const std::string& text : varied_texts()) EXPECT_EQ(legacy->encode(text), small_tokenizer().encode(text)) << text;
}

TEST(Bpe, LowestRankMergesFirst) {
  // "abc": (b,c) has rank 0, so b+c first, then a+bc.
  auto t1 = load(handmade({"a", "b", "c", "ab", "bc", "abc"}, {{"b", "c"}, {"a", "b"}, {"a", "bc"}}));
  EXPECT_EQ(t1->encode("abc"), (std::vector<int32_t>{5}));
  // Same vocabulary, (a,b) first: the pair (a, bc) is never formed, so "abc" stays ab + c.
  auto t2 = load(handmade({"a", "b", "c", "ab", "bc", "abc"}, {{"a", "b"}, {"b", "c"}, {"a", "bc"}}));
  EXPECT_EQ(texts_of(*t2, t2->encode("abc")), (std::vector<std::string>{"ab", "c"}));
}

TEST(Bpe, EqualRanksMergeLeftmostFirst) {
  auto tok = load(handmade({"a", "aa"}, {{"a", "a"}}));
  EXPECT_EQ(texts_of(*tok, tok->encode("aaa")), (std::vector<std::string>{"aa", "a"}));
  EXPECT_EQ(texts_of(*tok, tok->encode("aaaaa")), (std::vector<std::string>{"aa", "aa", "a"}));
}

TEST(Bpe, IgnoreMergesTakesWholeVocabularyWords) {
  // "abc" is in the vocabulary but no merge builds it.
  json j = handmade({"a", "b", "c", "ab", "abc"}, {{"a", "b"}});
  EXPECT_EQ(texts_of(*load(j), load(j)->encode("abc")), (std::vector<std::string>{"ab", "c"}));
  j["model"]["ignore_merges"] = true;
  EXPECT_EQ(load(j)->encode("abc"), (std::vector<int32_t>{4}));
}

TEST(Bpe, MissingByteIsAnErrorNamingTheByte) {
  auto tok = load(handmade({"a"}, {}));
  expect_error([&] { tok->encode("ab"); }, {"0x62", "model.vocab"});
}

// ---- added tokens ----

TEST(AddedTokens, MatchedOnlyWithAllowSpecial) {
  const Tokenizer& tok = small_tokenizer();
  const std::string text = "]~!b[]~b]user\nHi[e~[\n]~b]ai\n<mm:think>";
  std::vector<int32_t> special = tok.encode(text, /*allow_special=*/true);
  ASSERT_GE(special.size(), 4u);
  EXPECT_EQ(special[0], tok.require_token("]~!b["));
  EXPECT_EQ(special[1], tok.require_token("]~b]"));
  EXPECT_EQ(special.back(), tok.require_token("<mm:think>"));
  EXPECT_EQ(tok.decode(special), text);
  EXPECT_EQ(tok.decode(special, /*skip_special=*/true), "user\nHi\nai\n");

  std::vector<int32_t> plain = tok.encode(text);
  for (int32_t id : plain) EXPECT_FALSE(tok.is_special(id)) << id;
  EXPECT_EQ(tok.decode(plain), text);
}

TEST(AddedTokens, ControlStringsInUserTextStayOrdinaryText) {
  const Tokenizer& tok = small_tokenizer();
  for (const std::string text : {"]~b]", "]<]minimax[>[", "say ]~b]system and ]<]minimax[>[<tool_call>", "[e~["}) {
    std::vector<int32_t> ids = tok.encode(text);
    EXPECT_GT(ids.size(), 1u) << text;
    for (int32_t id : ids) EXPECT_LT(id, base_vocab_size()) << text;
    EXPECT_EQ(tok.decode(ids), text);
  }
}

TEST(AddedTokens, LongestMatchWinsAndSegmentsAreSplitSeparately) {
  json j = json::parse(small_json());
  j["added_tokens"].push_back({{"id", 5000}, {"content", "]~b]x"}, {"special", true}});
  auto tok = load(j);
  EXPECT_EQ(tok->encode("]~b]x", true), (std::vector<int32_t>{5000}));
  const std::vector<int32_t> ids = tok->encode("a]~b]b", true);
  ASSERT_EQ(ids.size(), 3u);
  EXPECT_EQ(ids[1], tok->require_token("]~b]"));
}

TEST(AddedTokens, NonSpecialAddedTokensAlwaysMatch) {
  json j = json::parse(small_json());
  j["added_tokens"].push_back({{"id", 5000}, {"content", "<custom>"}, {"special", false}});
  auto tok = load(j);
  const std::vector<int32_t> ids = tok->encode("a<custom>b");
  ASSERT_EQ(ids.size(), 3u);
  EXPECT_EQ(ids[1], 5000);
  EXPECT_FALSE(tok->is_special(5000));
  EXPECT_EQ(tok->vocab_size(), 5001);
}

TEST(AddedTokens, StripOptionsSwallowWhitespace) {
  json j = json::parse(small_json());
  j["added_tokens"].push_back({{"id", 5000}, {"content", "<L>"}, {"lstrip", true}, {"special", true}});
  j["added_tokens"].push_back({{"id", 5001}, {"content", "<R>"}, {"rstrip", true}, {"special", true}});
  auto tok = load(j);
  const std::vector<int32_t> l = tok->encode("a  <L>b", true);
  ASSERT_EQ(l.size(), 3u);
  EXPECT_EQ(l[1], 5000);
  const std::vector<int32_t> r = tok->encode("a<R> \n b", true);
  ASSERT_EQ(r.size(), 3u);
  EXPECT_EQ(r[1], 5001);
}

TEST(AddedTokens, TokenIdAndRequireToken) {
  const Tokenizer& tok = small_tokenizer();
  EXPECT_EQ(tok.token_id("[e~["), base_vocab_size() + 20);
  EXPECT_FALSE(tok.token_id("<no such token>").has_value());
  EXPECT_FALSE(tok.token_id("the").has_value());  // vocabulary words are not added tokens
  expect_error([&] { tok.require_token("<no such token>"); }, {"<no such token>"});
  expect_error([&] { tok.token_bytes(tok.vocab_size()); }, {"not in the vocabulary"});
  expect_error([&] { tok.decode({-1}); }, {"-1"});
}

// ---- pre-tokenization ----

std::vector<std::string> split_pieces(const tok::PreTokenizer& pre, std::string_view text) {
  tok::Pieces pieces;
  pre.run(text, pieces);
  return {pieces.views.begin(), pieces.views.end()};
}

TEST(PreTokenizer, M3PatternSplitsAsO200k) {
  auto pre = tok::PreTokenizer::from_json(json::parse(small_json())["pre_tokenizer"], "t");
  EXPECT_EQ(split_pieces(pre, "Hello world's 12345 foo!!!\n\n  x"),
            (std::vector<std::string>{"Hello", " world's", " ", "123", "45", " foo", "!!!\n\n", " ", " x"}));
  EXPECT_EQ(split_pieces(pre, "HTTPServer getX I'M"),
            (std::vector<std::string>{"HTTPServer", " get", "X", " I'M"}));
  EXPECT_EQ(split_pieces(pre, "a/b//\nc"), (std::vector<std::string>{"a", "/b", "//\n", "c"}));
}

TEST(PreTokenizer, CaseInsensitiveContractionsMatchExpandedForm) {
  // o200k as tiktoken ships it spells the contractions out case by case; M3's tokenizer.json
  // writes (?i:...). Both must split alike (U+017F long s aside, which PCRE2 case-folds to s).
  const std::string expanded =
      R"([^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+('s|'S|'t|'T|'re|'rE|'Re|'RE|'ve|'vE|'Ve|'VE|'m|'M|'ll|'lL|'Ll|'LL|'d|'D)?)"
      R"(|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*('s|'S|'t|'T|'re|'rE|'Re|'RE|'ve|'vE|'Ve|'VE|'m|'M|'ll|'lL|'Ll|'LL|'d|'D)?)"
      R"(|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
  tok::SplitRegex a(tok::kM3SplitPattern, false, "m3"), b(expanded, false, "o200k");
  std::mt19937 rng(7);
  const std::vector<std::string> parts = {"a", "B", "é", "Ж", "中", "'", "s", "S", "t", "re", "RE", "Ve", "ll", "LL",
                                          "d", "m", "M", " ", "  ", "\n", "\t", "1", "22", "!", "/", "ǅ", "\u0301"};
  for (int round = 0; round < 2000; ++round) {
    std::string text;
    for (int i = 0, n = 1 + rng() % 20; i < n; ++i) text += parts[rng() % parts.size()];
    std::vector<std::string_view> pa, pb;
    a.split(text, pa);
    b.split(text, pb);
    EXPECT_EQ(pa, pb) << text;
  }
}

TEST(PreTokenizer, ByteLevelWithGpt2Regex) {
  auto pre = tok::PreTokenizer::from_json(
      json{{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", true}, {"use_regex", true}}, "t");
  EXPECT_EQ(split_pieces(pre, "Hello world's  x 42"),
            (std::vector<std::string>{"Hello", " world", "'s", " ", " x", " 42"}));
  auto prefixed = tok::PreTokenizer::from_json(json{{"type", "ByteLevel"}, {"add_prefix_space", true}}, "t");
  EXPECT_EQ(split_pieces(prefixed, "Hello"), (std::vector<std::string>{" Hello"}));
}

TEST(PreTokenizer, EmptyMatchesMakeNoPieces) {
  tok::SplitRegex stars("x*", false, "t"), end("$", false, "t");
  std::vector<std::string_view> pieces;
  stars.split("abxxc", pieces);
  EXPECT_EQ(pieces, (std::vector<std::string_view>{"ab", "xx", "c"}));
  pieces.clear();
  end.split("ab\xff", pieces);
  EXPECT_EQ(pieces, (std::vector<std::string_view>{"ab", "\xff"}));
}

TEST(PreTokenizer, LiteralSplitPattern) {
  auto pre = tok::PreTokenizer::from_json(
      json{{"type", "Split"}, {"pattern", {{"String", "."}}}, {"behavior", "Isolated"}, {"invert", false}}, "t");
  EXPECT_EQ(split_pieces(pre, "a.b..c"), (std::vector<std::string>{"a", ".", "b", ".", ".", "c"}));
}

TEST(PreTokenizer, VeryLongPiecesDoNotFail) {
  const Tokenizer& tok = small_tokenizer();
  for (const std::string& text : {std::string(200000, 'a'), std::string(200000, ' ') + "x",
                                  std::string(100000, '\n') + " " + std::string(100000, '!')}) {
    EXPECT_EQ(tok.decode(tok.encode(text)), text);
  }
}

// ---- invalid UTF-8 and random bytes ----

TEST(Tokenizer, InvalidUtf8BytesAreTheirOwnTokens) {
  const Tokenizer& tok = small_tokenizer();
  const std::string text = "ab\xff\xfe cd \xc3(\xe2\x82 \xed\xa0\x80 end\xf0\x9f";
  std::vector<int32_t> ids = tok.encode(text);
  EXPECT_EQ(tok.decode(ids), text);
  // Each invalid byte stands alone as its single-byte token.
  std::vector<std::string> pieces = texts_of(tok, ids);
  for (std::string bad : {"\xff", "\xfe", "\xc3", "\xe2", "\x82", "\xed", "\xa0", "\xf0", "\x9f"}) {
    EXPECT_NE(std::find(pieces.begin(), pieces.end(), bad), pieces.end()) << "byte " << int(uint8_t(bad[0]));
  }
}

TEST(Tokenizer, RandomBytesRoundTrip) {
  const Tokenizer& tok = small_tokenizer();
  std::mt19937 rng(1234);
  const std::vector<std::string> valid = {"a", "Z", " ", "\n", "é", "中", "🙂", "1", "'s", "!", "]~b]"};
  for (int round = 0; round < 500; ++round) {
    std::string text;
    for (int i = 0, n = rng() % 64; i < n; ++i) {
      if (rng() % 3 == 0) {
        text.push_back(static_cast<char>(rng() % 256));
      } else {
        text += valid[rng() % valid.size()];
      }
    }
    ASSERT_EQ(tok.decode(tok.encode(text)), text) << "round " << round;
    ASSERT_EQ(tok.decode(tok.encode(text, true)), text) << "round " << round;
  }
}

TEST(Tokenizer, ConcurrentEncodeMatchesSerial) {
  const Tokenizer& tok = small_tokenizer();
  std::vector<std::vector<int32_t>> expected;
  for (const std::string& t : varied_texts()) expected.push_back(tok.encode(t));
  std::vector<std::thread> threads;
  std::atomic<int> mismatches{0};
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&] {
      for (int rep = 0; rep < 50; ++rep) {
        for (size_t i = 0; i < varied_texts().size(); ++i) {
          if (tok.encode(varied_texts()[i]) != expected[i]) ++mismatches;
        }
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(mismatches.load(), 0);
}

// ---- streaming ----

TEST(StreamingDecoder, HoldsBackSplitCharacters) {
  auto bytes_only = Tokenizer::from_json_text(make_small_tokenizer_json(0), "bytes");
  const std::string emoji = "🙂";  // 4 bytes -> 4 byte tokens
  std::vector<int32_t> ids = bytes_only->encode("a" + emoji + "b");
  ASSERT_EQ(ids.size(), 6u);
  StreamingDecoder dec(*bytes_only);
  EXPECT_EQ(dec.push(ids[0]), "a");
  EXPECT_EQ(dec.push(ids[1]), "");
  EXPECT_EQ(dec.push(ids[2]), "");
  EXPECT_EQ(dec.push(ids[3]), "");
  EXPECT_EQ(dec.push(ids[4]), emoji);
  EXPECT_EQ(dec.push(ids[5]), "b");
  EXPECT_EQ(dec.flush(), "");
}

TEST(StreamingDecoder, InvalidAndUnfinishedBytesBecomeReplacementCharacters) {
  auto bytes_only = Tokenizer::from_json_text(make_small_tokenizer_json(0), "bytes");
  StreamingDecoder dec(*bytes_only);
  std::string out;
  for (int32_t id : bytes_only->encode("x\xff" "y\xe2\x82")) out += dec.push(id);
  EXPECT_EQ(out, "x\xEF\xBF\xBDy");  // the unfinished euro sign waits
  EXPECT_EQ(dec.flush(), "\xEF\xBF\xBD");
  EXPECT_EQ(dec.flush(), "");
}

TEST(StreamingDecoder, SkipsSpecialTokensWhenAsked) {
  const Tokenizer& tok = small_tokenizer();
  std::vector<int32_t> ids = tok.encode("]~b]ai\nhello[e~[", true);
  StreamingDecoder keep(tok), skip(tok, /*skip_special=*/true);
  std::string a, b;
  for (int32_t id : ids) {
    a += keep.push(id);
    b += skip.push(id);
  }
  EXPECT_EQ(a + keep.flush(), "]~b]ai\nhello[e~[");
  EXPECT_EQ(b + skip.flush(), "ai\nhello");
}

// ---- malformed tokenizer.json ----

TEST(TokenizerJson, MalformedFilesNameTheField) {
  const json good = json::parse(small_json());
  auto with = [&](auto&& edit) {
    json j = good;
    edit(j);
    return j.dump();
  };
  auto load_text = [](const std::string& text) { return [text] { Tokenizer::from_json_text(text, "bad.json"); }; };

  expect_error(load_text("{not json"), {"bad.json", "not valid JSON"});
  expect_error(load_text("[1, 2]"), {"bad.json", "object"});
  expect_error(load_text(with([](json& j) { j.erase("model"); })), {"bad.json", "model"});
  expect_error(load_text(with([](json& j) { j["model"]["type"] = "WordPiece"; })), {"model.type", "WordPiece"});
  expect_error(load_text(with([](json& j) { j["model"].erase("vocab"); })), {"model.vocab"});
  expect_error(load_text(with([](json& j) { j["model"]["vocab"]["Ġthe"] = "x"; })), {"model.vocab", "Ġthe"});
  expect_error(load_text(with([](json& j) { j["model"]["merges"][3] = {"Ġzz", "q"}; })),
               {"model.merges[3]", "Ġzz", "not in model.vocab"});
  expect_error(load_text(with([](json& j) { j["model"]["merges"][1] = "a b c"; })), {"model.merges[1]"});
  expect_error(load_text(with([](json& j) { j["model"]["dropout"] = 0.1; })), {"model.dropout"});
  expect_error(load_text(with([](json& j) { j["model"]["byte_fallback"] = true; })), {"model.byte_fallback"});
  expect_error(load_text(with([](json& j) { j["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"] = "(unclosed"; })),
               {"pre_tokenizer.pretokenizers[0].pattern.Regex", "cannot compile"});
  expect_error(load_text(with([](json& j) { j["pre_tokenizer"]["pretokenizers"][0]["behavior"] = "Removed"; })),
               {"pre_tokenizer.pretokenizers[0].behavior", "Removed"});
  expect_error(load_text(with([](json& j) { j["pre_tokenizer"]["pretokenizers"][0]["invert"] = true; })),
               {"pre_tokenizer.pretokenizers[0].invert"});
  expect_error(load_text(with([](json& j) { j["pre_tokenizer"] = {{"type", "Metaspace"}}; })),
               {"pre_tokenizer.type", "Metaspace"});
  expect_error(load_text(with([](json& j) { j["normalizer"] = {{"type", "NFC"}}; })), {"normalizer", "NFC"});
  expect_error(load_text(with([](json& j) { j["decoder"] = {{"type", "WordPiece"}}; })), {"decoder", "WordPiece"});
  expect_error(load_text(with([](json& j) { j.erase("decoder"); })), {"decoder"});
  expect_error(load_text(with([](json& j) { j["added_tokens"][2].erase("content"); })), {"added_tokens[2].content"});
  expect_error(load_text(with([](json& j) { j["added_tokens"][0]["id"] = -5; })), {"added_tokens[0].id"});
  expect_error(load_text(with([](json& j) { j["added_tokens"][0]["single_word"] = true; })),
               {"added_tokens[0].single_word"});
  expect_error([] { Tokenizer::from_file("/nonexistent/tokenizer.json"); }, {"/nonexistent/tokenizer.json"});
}

TEST(TokenizerJson, MutatedFilesNeverCrash) {
  // Flip bytes of a small tokenizer.json: loading either works or throws m3::Error.
  const std::string good = make_small_tokenizer_json(20);
  std::mt19937 rng(99);
  for (int round = 0; round < 200; ++round) {
    std::string text = good;
    for (int k = 0; k < 3; ++k) text[rng() % text.size()] = static_cast<char>(rng() % 128);
    try {
      auto tok = Tokenizer::from_json_text(text, "mutated.json");
      (void)tok->encode("Hello world, ]~b] 123", true);
    } catch (const Error&) {
    }
  }
}

TEST(Tokenizer, HasTokenSeesIdsLeftUnused) {
  // An added token placed past the vocabulary leaves ids below vocab_size() that stand for nothing
  // (o200k_base has such gaps): has_token tells them apart, token_bytes refuses them.
  json j = json::parse(small_json());
  const int32_t n = small_tokenizer().vocab_size();
  j["added_tokens"].push_back({{"id", n + 3}, {"content", "<gap>"}, {"single_word", false}, {"lstrip", false},
                               {"rstrip", false}, {"normalized", false}, {"special", true}});
  const auto tok = load(j);
  EXPECT_EQ(tok->vocab_size(), n + 4);
  EXPECT_TRUE(tok->has_token(0));
  EXPECT_TRUE(tok->has_token(n - 1));
  EXPECT_FALSE(tok->has_token(n + 1));
  EXPECT_TRUE(tok->has_token(n + 3));
  EXPECT_FALSE(tok->has_token(-1));
  EXPECT_FALSE(tok->has_token(n + 4));
  EXPECT_THROW(tok->token_bytes(n + 1), Error);
}

}  // namespace
}  // namespace m3

namespace m3 {
// The same fuzz finding in tokenizer.json: a number past double's range is a one-line error.
TEST(Tokenizer, NumbersPastDoubleRangeAreAnError) {
  expect_error([] { Tokenizer::from_json_text("{\"version\": 1e999}", "tok/tokenizer.json"); },
               {"tok/tokenizer.json", "not valid JSON"});
}
}  // namespace m3
