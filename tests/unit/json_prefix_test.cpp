// JsonPrefix against nlohmann::json's parser: a text is accepted and complete exactly when it is a
// JSON object; every prefix of a valid text is accepted; a byte that no JSON text can follow with
// is refused and leaves the state as it was.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <random>
#include <string>

#include "m3/chat/json_prefix.h"

namespace m3::chat {
namespace {

using nlohmann::json;

bool whole(const std::string& s) {
  JsonPrefix p;
  return p.feed(s) && p.complete();
}

bool is_object_text(const std::string& s) {
  if (!json::accept(s)) return false;
  return json::parse(s).is_object();
}

TEST(JsonPrefix, Table) {
  for (const char* ok : {"{}", " {\"a\":1} ", "{\"a\":[1,2.5,-0.0e+7,true,false,null,\"x\\u00e9\\n\"]}",
                         "{\"k\":{\"n\":{}},\"e\":[],\"s\":\"h\xc3\xa9\"}", "\n{\"a\" : [ [ ] , { } ] }\t"}) {
    EXPECT_TRUE(whole(ok)) << ok;
    EXPECT_TRUE(is_object_text(ok)) << ok;
  }
  for (const char* bad : {"[]", "1", "\"s\"", "{\"a\":01}", "{\"a\":1,}", "{\"a\" 1}", "{a:1}", "{\"a\":tru}",
                          "{\"a\":\"\\x\"}", "{\"a\":\"\\u12g4\"}", "{\"a\":1.}", "{\"a\":-}", "{\"a\":1e}", "{}}",
                          "{\"a\":[1,]}", "{\"a\":\"tab\there\"}"}) {
    EXPECT_FALSE(whole(bad)) << bad;
  }
  JsonPrefix p;
  EXPECT_TRUE(p.feed("{\"a\":12"));
  EXPECT_FALSE(p.complete());
  EXPECT_FALSE(p.feed("x"));        // refused...
  EXPECT_TRUE(p.feed("3}"));        // ...and the state is as before it
  EXPECT_TRUE(p.complete());
  EXPECT_TRUE(p.feed(" \n"));
  EXPECT_FALSE(p.feed("{"));        // one object only
  EXPECT_TRUE(JsonPrefix().accepts("{\"unfinished"));
}

// Random objects as JSON text (ASCII: the recognizer does not re-validate UTF-8, the parser does):
// every prefix is accepted, the whole is complete; a random byte changed or inserted gives a text
// the recognizer accepts exactly when the parser does.
TEST(JsonPrefix, AgreesWithAParserOnRandomTexts) {
  std::mt19937 rng(5);
  const std::string alphabet = "{}[]:,\"\\ 0123456789.-+eEtrufalsn/u\n";
  std::function<json(int)> value = [&](int depth) -> json {
    switch (rng() % (depth > 3 ? 4 : 6)) {
      case 0: return json(int64_t(rng() % 2000) - 1000);
      case 1: return json(double(rng() % 1000) / 7.0);
      case 2: return json(std::string(1 + rng() % 5, char('a' + rng() % 26)) + "\"\\\n");
      case 3: return rng() % 2 ? json(nullptr) : json(bool(rng() % 2));
      case 4: {
        json a = json::array();
        for (int i = int(rng() % 4); i > 0; --i) a.push_back(value(depth + 1));
        return a;
      }
      default: {
        json o = json::object();
        for (int i = int(rng() % 4); i > 0; --i) o[std::string(1, char('a' + rng() % 26))] = value(depth + 1);
        return o;
      }
    }
  };
  int agreed_invalid = 0;
  for (int n = 0; n < 400; ++n) {
    json o = json::object();
    for (int i = int(rng() % 4); i > 0; --i) o[std::string(1, char('k')) + char('0' + i)] = value(0);
    const std::string text = o.dump(rng() % 2 ? 1 : -1);
    JsonPrefix p;
    for (char c : text) ASSERT_TRUE(p.feed(std::string(1, c))) << text;
    ASSERT_TRUE(p.complete()) << text;
    std::string mutated = text;
    const size_t at = rng() % mutated.size();
    const char c = alphabet[rng() % alphabet.size()];
    if (rng() % 2) mutated[at] = c;
    else mutated = mutated.substr(0, at) + c + mutated.substr(at);
    bool parser = false;
    try {
      parser = json::parse(mutated).is_object();
    } catch (const json::out_of_range&) {
      continue;  // a grammatical number beyond double's range: the parser refuses it, the grammar does not
    } catch (const json::parse_error&) {
    }
    EXPECT_EQ(whole(mutated), parser) << mutated;
    agreed_invalid += parser ? 0 : 1;
  }
  EXPECT_GT(agreed_invalid, 100);  // the mutations really produce invalid texts
}

}  // namespace
}  // namespace m3::chat
