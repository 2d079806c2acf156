#include "chat_session.h"

#include "m3/error.h"
#include "m3/chat/chat_template.h"
#include "m3/chat/output_parser.h"
#include "m3/tokenizer.h"

namespace m3::cli {

namespace {

SessionOptions session_options(const ChatSessionOptions& o) {
  SessionOptions s;
  s.cache_type = o.cache_type;
  s.prefill_chunk = o.prefill_chunk;
  s.context = o.context;
  s.reuse_prefix = o.reuse_kv;
  return s;
}

}  // namespace

ChatSession::ChatSession(Engine& engine, ChatSessionOptions options)
    : engine_(engine), opt_(std::move(options)), session_(engine, session_options(opt_)), messages_(chat::Json::array()) {
  clear();
}

void ChatSession::clear() {
  messages_ = chat::Json::array();
  if (!opt_.system.empty()) messages_.push_back({{"role", "system"}, {"content", opt_.system}});
  media_.clear();
  pending_.clear();
  have_last_ = false;
}

void ChatSession::load_messages(const chat::Json& messages) {
  M3_CHECK(messages.is_array(), "expected a JSON array of messages (or {\"messages\": [...]})");
  std::vector<Media> media;
  for (size_t i = 0; i < messages.size(); ++i) {
    const chat::Json& m = messages[i];
    M3_CHECK(m.is_object(), "messages[", i, "]: expected an object");
    auto content = m.find("content");
    if (content == m.end() || !content->is_array()) continue;
    for (size_t j = 0; j < content->size(); ++j) {
      const chat::Json& part = (*content)[j];
      const std::string type = part.is_object() && part.contains("type") && part["type"].is_string() ? part["type"].get<std::string>() : "";
      if (type != "image_url" && type != "video_url") continue;
      const chat::Json& ref = part.contains(type) ? part[type] : chat::Json();
      M3_CHECK(ref.is_object() && ref.contains("url") && ref["url"].is_string(), "messages[", i, "].content[", j, "].",
               type, ".url: expected a string (a local file)");
      MediaInput in;
      in.kind = type == "video_url" ? vision::MediaKind::Video : vision::MediaKind::Image;
      in.path = ref["url"].get<std::string>();
      media.push_back(Media{in.path, in.kind, encode_media(engine_, in)});
    }
  }
  chat::ChatTemplateOptions topt;
  topt.thinking_mode = opt_.thinking_mode;
  const chat::RenderedPrompt rendered = chat::render_chat(messages, opt_.tools, topt);  // throws naming the field
  M3_CHECK(rendered.media.size() == media.size(), "the conversation has ", rendered.media.size(), " media parts but ",
           media.size(), " could be read");
  messages_ = messages;
  media_ = std::move(media);
  pending_.clear();
  have_last_ = false;  // the next prompt is tokenized whole; the cache still matches its prefix
}

void ChatSession::attach_media(const std::string& path, vision::MediaKind kind) {
  MediaInput in;
  in.kind = kind;
  in.path = path;
  pending_.push_back(Media{path, kind, encode_media(engine_, in)});
}

std::vector<std::shared_ptr<const EncodedMedia>> ChatSession::encoded_media() const {
  std::vector<std::shared_ptr<const EncodedMedia>> items;
  for (const Media& m : media_) items.push_back(m.encoded);
  return items;
}

Prompt ChatSession::build_prompt(bool& opens_reasoning) const {
  chat::ChatTemplateOptions topt;
  topt.thinking_mode = opt_.thinking_mode;
  const chat::RenderedPrompt rendered = chat::render_chat(messages_, opt_.tools, topt);
  opens_reasoning = rendered.opens_reasoning;
  M3_CHECK(rendered.media.size() == media_.size(), "chat: ", rendered.media.size(), " media parts but ",
           media_.size(), " images and videos");
  const Tokenizer& tok = engine_.tokenizer();
  const auto items = encoded_media();
  const std::string text = rendered.text();
  // The template only appends turns, so the text extends the last turn's conversation, whose
  // rendering ends with "[e~[\n". Everything from that end-of-turn token on is tokenized anew; it
  // starts at a control token, so the ids are those of tokenizing the whole text.
  const std::string turn_end = std::string(chat::kTurnEnd) + "\n";
  if (have_last_ && last_text_.size() >= turn_end.size() && text.compare(0, last_text_.size(), last_text_) == 0 &&
      last_text_.compare(last_text_.size() - turn_end.size(), turn_end.size(), turn_end) == 0) {
    const size_t cut = last_text_.size() - turn_end.size();
    chat::RenderedPrompt tail;
    size_t at = 0;
    for (const auto& seg : rendered.segments) {
      const size_t end = at + seg.text.size();
      if (end > cut) tail.segments.push_back({seg.text.substr(cut > at ? cut - at : 0), seg.special});
      at = end;
    }
    Prompt prompt = last_prompt_;
    const size_t used = prompt.append_expanding(tok, chat::tokenize(tok, tail), items, last_media_);
    M3_CHECK(last_media_ + used == items.size(), "chat: ", items.size() - last_media_, " new images but ", used,
             " placeholders");
    return prompt;
  }
  Prompt prompt;
  const size_t used = prompt.append_expanding(tok, chat::tokenize(tok, rendered), items, 0);
  M3_CHECK(used == items.size(), "chat: ", items.size(), " images but ", used, " placeholders");
  return prompt;
}

chat::ParsedMessage ChatSession::turn(const std::string& role, const std::string& user_text, const ChatTurnCallbacks& cb,
                                      const std::atomic<bool>& interrupt, ChatTurnStats& stats) {
  stats = ChatTurnStats{};
  stats.turn = ++turn_;
  const size_t media_before = media_.size();
  chat::Json user = {{"role", role}};
  if (pending_.empty()) {
    user["content"] = user_text;
  } else {
    chat::Json parts = chat::Json::array();
    for (const Media& m : pending_) {
      const char* type = m.kind == vision::MediaKind::Video ? "video_url" : "image_url";
      parts.push_back({{"type", type}, {type, {{"url", m.path}}}});
    }
    parts.push_back({{"type", "text"}, {"text", user_text}});
    user["content"] = std::move(parts);
    for (Media& m : pending_) media_.push_back(std::move(m));
    pending_.clear();
  }
  messages_.push_back(std::move(user));
  // Undo the user message when the turn produced nothing to keep.
  auto drop_turn = [&] {
    messages_.erase(messages_.size() - 1);
    media_.resize(media_before);
    --turn_;
  };

  bool opens_reasoning = false;
  Prompt prompt;
  try {
    prompt = build_prompt(opens_reasoning);
  } catch (...) {
    drop_turn();
    throw;
  }

  const Tokenizer& tok = engine_.tokenizer();
  GenerationConfig g;
  g.max_tokens = opt_.max_tokens;
  g.sampling = opt_.sampling;
  g.sample_vocab = tok.vocab_size();
  g.stop_at_end_of_turn = opt_.stop_at_eos;
  g.reasoning = ReasoningOptions{opens_reasoning, false, opt_.max_reasoning_tokens};

  chat::OutputParserOptions popt;
  popt.starts_in_reasoning = opens_reasoning;
  popt.tools = opt_.tools;
  chat::OutputParser parser(popt);
  auto emit = [&](const std::vector<chat::ChatDelta>& ds) {
    if (cb.on_delta)
      for (const auto& d : ds) cb.on_delta(d);
  };
  SessionCallbacks scb;
  scb.on_text = [&](std::string_view text) { emit(parser.push(std::string(text))); };
  scb.on_token = [&](const TokenEvent&) { return !interrupt.load(); };
  scb.on_prefill = [&](int64_t done, int64_t total) {
    if (interrupt.load() && done < total) return false;
    if (done == total && cb.on_decode_start) cb.on_decode_start();
    return true;
  };
  SessionStats ss;
  try {
    ss = session_.generate(prompt, g, scb);
  } catch (...) {
    drop_turn();
    throw;
  }
  stats.prompt_tokens = ss.prompt_tokens;
  stats.reused_tokens = ss.reused_tokens;
  stats.prefilled_tokens = ss.prefilled_tokens;  // an interrupted prefill: the chunks done stay cached
  stats.interrupted = ss.interrupted;
  if (ss.prefill_interrupted) {
    drop_turn();
    return {};
  }
  emit(parser.finish());
  stats.generated_tokens = ss.generated_tokens;
  stats.forced_tokens = ss.forced_tokens;
  stats.reasoning_tokens = ss.reasoning_tokens;
  stats.prefill_seconds = ss.prefill_seconds;
  stats.decode_seconds = ss.decode_seconds;
  stats.decode_tokens_per_second = ss.decode_tokens_per_second();
  stats.stopped_at_eos = ss.finish == FinishReason::EndOfTurn;

  chat::ParsedMessage msg = parser.message();
  messages_.push_back(msg.to_json());

  std::vector<int32_t> generated = ss.generated;
  if (!generated.empty() && generated.back() == tok.require_token(chat::kTurnEnd))
    generated.pop_back();
  last_prompt_ = std::move(prompt);
  last_prompt_.append_tokens(generated);
  chat::ChatTemplateOptions topt;
  topt.thinking_mode = opt_.thinking_mode;
  topt.add_generation_prompt = false;
  last_text_ = chat::render_chat(messages_, opt_.tools, topt).text();
  last_media_ = media_.size();
  have_last_ = true;
  return msg;
}

}  // namespace m3::cli
