#include "m3/chat/json_prefix.h"

#include <cmath>

namespace m3::chat {

namespace {

bool is_ws(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }
bool is_digit(char c) { return c >= '0' && c <= '9'; }
bool is_hex(char c) { return is_digit(c) || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F'); }

}  // namespace

bool JsonPrefix::feed(std::string_view s) {
  JsonPrefix next = *this;
  for (char c : s)
    if (!next.step(c)) return false;
  *this = std::move(next);
  return true;
}

bool JsonPrefix::accepts(std::string_view s) const {
  JsonPrefix next = *this;
  for (char c : s)
    if (!next.step(c)) return false;
  return true;
}

bool JsonPrefix::end_value() {
  mode_ = stack_.empty() ? Mode::Done : Mode::After;
  return true;
}

bool JsonPrefix::step(char c) {
  switch (mode_) {
    case Mode::Start:
      if (is_ws(c)) return true;
      if (c != '{') return false;  // the top-level value is an object
      stack_.push_back('{');
      mode_ = Mode::Key;
      return true;
    case Mode::ArrayStart:
      if (c == ']') {
        stack_.pop_back();
        return end_value();
      }
      [[fallthrough]];
    case Mode::Value:
      if (is_ws(c)) return true;
      switch (c) {
        case '{': stack_.push_back('{'); mode_ = Mode::Key; return true;
        case '[': stack_.push_back('['); mode_ = Mode::ArrayStart; return true;
        case '"': string_is_key_ = false; mode_ = Mode::String; return true;
        case '-': num_ = Num::Minus; mode_ = Mode::Number; return true;
        case '0': num_ = Num::Zero; mode_ = Mode::Number; return true;
        case 't': literal_ = "rue"; mode_ = Mode::Literal; return true;
        case 'f': literal_ = "alse"; mode_ = Mode::Literal; return true;
        case 'n': literal_ = "ull"; mode_ = Mode::Literal; return true;
        default:
          if (!is_digit(c)) return false;
          num_ = Num::Int;
          mode_ = Mode::Number;
          return true;
      }
    case Mode::Key:
      if (c == '}') {
        stack_.pop_back();
        return end_value();
      }
      [[fallthrough]];
    case Mode::NextKey:
      if (is_ws(c)) return true;
      if (c != '"') return false;
      string_is_key_ = true;
      mode_ = Mode::String;
      return true;
    case Mode::Colon:
      if (is_ws(c)) return true;
      if (c != ':') return false;
      mode_ = Mode::Value;
      return true;
    case Mode::After:
      if (is_ws(c)) return true;
      if (c == ',') {
        mode_ = stack_.back() == '{' ? Mode::NextKey : Mode::Value;
        return true;
      }
      if ((c == '}' && stack_.back() == '{') || (c == ']' && stack_.back() == '[')) {
        stack_.pop_back();
        return end_value();
      }
      return false;
    case Mode::String:
      if (c == '"') {
        if (string_is_key_) {
          mode_ = Mode::Colon;
          return true;
        }
        return end_value();
      }
      if (c == '\\') {
        mode_ = Mode::Escape;
        return true;
      }
      return static_cast<unsigned char>(c) >= 0x20;  // control characters must be escaped
    case Mode::Escape:
      if (c == 'u') {
        hex_left_ = 4;
        mode_ = Mode::Unicode;
        return true;
      }
      if (c == '"' || c == '\\' || c == '/' || c == 'b' || c == 'f' || c == 'n' || c == 'r' || c == 't') {
        mode_ = Mode::String;
        return true;
      }
      return false;
    case Mode::Unicode:
      if (!is_hex(c)) return false;
      if (--hex_left_ == 0) mode_ = Mode::String;
      return true;
    case Mode::Number:
      switch (num_) {
        case Num::Minus:
          if (c == '0') num_ = Num::Zero;
          else if (is_digit(c)) num_ = Num::Int;
          else return false;
          return true;
        case Num::Dot:
          if (!is_digit(c)) return false;
          num_ = Num::Frac;
          return true;
        case Num::Exp:
          if (c == '+' || c == '-') num_ = Num::ExpSign;
          else if (is_digit(c)) num_ = Num::ExpInt;
          else return false;
          return true;
        case Num::ExpSign:
          if (!is_digit(c)) return false;
          num_ = Num::ExpInt;
          return true;
        case Num::Int:
        case Num::Frac:
        case Num::ExpInt:
          if (is_digit(c)) return true;
          [[fallthrough]];
        case Num::Zero:
          if (c == '.' && (num_ == Num::Zero || num_ == Num::Int)) {
            num_ = Num::Dot;
            return true;
          }
          if ((c == 'e' || c == 'E') && num_ != Num::ExpInt) {
            num_ = Num::Exp;
            return true;
          }
          // The number ends here; c belongs to what follows it.
          end_value();
          return step(c);
      }
      return false;
    case Mode::Literal:
      if (c != literal_.front()) return false;
      literal_.erase(0, 1);
      if (literal_.empty()) return end_value();
      return true;
    case Mode::Done:
      return is_ws(c);
  }
  return false;
}

void mask_json_tokens(const JsonPrefix& json, const std::vector<std::string>& token_text, float* logits,
                      int32_t also_allowed) {
  for (size_t t = 0; t < token_text.size(); ++t) {
    const std::string& text = token_text[t];
    if (int32_t(t) != also_allowed && (text.empty() || !json.accepts(text))) logits[t] = -INFINITY;
  }
}

}  // namespace m3::chat
