#include "chat_session.h"

#include <algorithm>
#include <cstring>

#include "base/error.h"
#include "chat/chat_template.h"
#include "chat/output_parser.h"
#include "runtime/multimodal_prompt.h"
#include "tokenizer/tokenizer.h"

namespace m3::cli {

namespace {

// Thrown out of the prefill progress callback to stop a prefill between two chunks; the cache
// then holds every chunk done so far, consistently.
struct PrefillInterrupted {};

KvCacheShape cache_shape_of(const Engine& engine, DType type) {
  KvCacheShape shape = engine.model->cache_shape();
  shape.dtype = type;
  return shape;
}

}  // namespace

ChatSession::ChatSession(Engine& engine, ChatSessionOptions options)
    : engine_(engine), opt_(std::move(options)), messages_(chat::Json::array()),
      cache_(cache_shape_of(engine, opt_.cache_type)) {
  clear();
}

void ChatSession::clear() {
  messages_ = chat::Json::array();
  if (!opt_.system.empty()) messages_.push_back({{"role", "system"}, {"content", opt_.system}});
  images_.clear();
  pending_.clear();
  have_last_ = false;
}

void ChatSession::attach_media(const std::string& path, vision::MediaKind kind) {
  // The item alone through the shared multimodal path: its ids are the placeholder's expansion and
  // its embedding rows those ids' rows with the vision features (a video's timestamp text included).
  const bool video = kind == vision::MediaKind::Video;
  const std::string placeholder(video ? chat::kVideoPlaceholder : chat::kImagePlaceholder);
  const std::vector<std::string> paths = {path};
  const MultimodalPrompt mm = build_multimodal_prompt(engine_, placeholder, video ? std::vector<std::string>{} : paths,
                                                      video ? paths : std::vector<std::string>{});
  Image img;
  img.path = path;
  img.kind = kind;
  img.serial = next_serial_++;
  img.ids = mm.ids;
  img.features = mm.embeddings;
  pending_.push_back(std::move(img));
}

size_t ChatSession::append_expanded(const std::vector<int32_t>& plain, size_t first_image, std::vector<int32_t>& ids,
                                    std::vector<int64_t>& tags) const {
  const std::optional<int32_t> image = engine_.tokenizer->token_id(chat::kImagePlaceholder);
  const std::optional<int32_t> video = engine_.tokenizer->token_id(chat::kVideoPlaceholder);
  size_t next = first_image;
  for (int32_t id : plain) {
    // Only the template writes placeholders as control tokens (a user's "]<]image[>[" stays text).
    const bool is_image = image && id == *image, is_video = video && id == *video;
    if (is_image || is_video) {
      M3_CHECK(next < images_.size(), "chat: more media placeholders than images and videos");
      const Image& img = images_[next++];
      M3_CHECK(is_video == (img.kind == vision::MediaKind::Video), "chat: the template's media order differs from ",
               img.path);
      ids.insert(ids.end(), img.ids.begin(), img.ids.end());
      tags.insert(tags.end(), img.ids.size(), img.serial);
    } else {
      ids.push_back(id);
      tags.push_back(-1);
    }
  }
  return next - first_image;
}

const ChatSession::Image* ChatSession::image_by_serial(int64_t serial) const {
  for (const Image& img : images_)
    if (img.serial == serial) return &img;
  return nullptr;
}

void ChatSession::build_prompt(std::vector<int32_t>& ids, std::vector<int64_t>& tags, bool& opens_reasoning) const {
  chat::ChatTemplateOptions topt;
  topt.thinking_mode = opt_.thinking_mode;
  const chat::RenderedPrompt rendered = chat::render_chat(messages_, opt_.tools, topt);
  opens_reasoning = rendered.opens_reasoning;
  M3_CHECK(rendered.media.size() == images_.size(), "chat: ", rendered.media.size(), " media parts but ",
           images_.size(), " images");
  ids.clear();
  tags.clear();
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
    ids = last_ids_;
    tags = last_tags_;
    const size_t used = append_expanded(chat::tokenize(*engine_.tokenizer, tail), last_images_, ids, tags);
    M3_CHECK(last_images_ + used == images_.size(), "chat: ", images_.size() - last_images_,
             " new images but ", used, " placeholders");
    return;
  }
  const size_t used = append_expanded(chat::tokenize(*engine_.tokenizer, rendered), 0, ids, tags);
  M3_CHECK(used == images_.size(), "chat: ", images_.size(), " images but ", used, " placeholders");
}

chat::ParsedMessage ChatSession::turn(const std::string& role, const std::string& user_text, const ChatTurnCallbacks& cb,
                                      const std::atomic<bool>& interrupt, ChatTurnStats& stats) {
  stats = ChatTurnStats{};
  stats.turn = ++turn_;
  const size_t images_before = images_.size();
  chat::Json user = {{"role", role}};
  if (pending_.empty()) {
    user["content"] = user_text;
  } else {
    chat::Json parts = chat::Json::array();
    for (const Image& img : pending_) {
      const char* type = img.kind == vision::MediaKind::Video ? "video_url" : "image_url";
      parts.push_back({{"type", type}, {type, {{"url", img.path}}}});
    }
    parts.push_back({{"type", "text"}, {"text", user_text}});
    user["content"] = std::move(parts);
    for (Image& img : pending_) images_.push_back(std::move(img));
    pending_.clear();
  }
  messages_.push_back(std::move(user));
  // Undo the user message when the turn produced nothing to keep.
  auto drop_turn = [&] {
    messages_.erase(messages_.size() - 1);
    images_.resize(images_before);
    --turn_;
  };

  std::vector<int32_t> ids;
  std::vector<int64_t> tags;
  bool opens_reasoning = false;
  try {
    build_prompt(ids, tags, opens_reasoning);
  } catch (...) {
    drop_turn();
    throw;
  }
  const int64_t n = int64_t(ids.size());

  // Longest common prefix of the cached tokens and the prompt, image identity included; at least
  // one prompt token is prefilled so that its logits start the reply.
  int64_t reuse = 0;
  if (opt_.reuse_kv) {
    const int64_t limit = std::min<int64_t>(int64_t(cached_ids_.size()), n - 1);
    while (reuse < limit && cached_ids_[size_t(reuse)] == ids[size_t(reuse)] &&
           cached_tags_[size_t(reuse)] == tags[size_t(reuse)])
      ++reuse;
  }
  // Truncating inside a block is exact: attention reads only positions below the query's, and
  // the slots past the new length are rewritten before anything reads them (generate_budget_test).
  cache_.truncate(reuse);
  cached_ids_.resize(size_t(reuse));
  cached_tags_.resize(size_t(reuse));
  stats.prompt_tokens = n;
  stats.reused_tokens = reuse;
  stats.prefilled_tokens = n - reuse;

  const std::vector<int32_t> rest(ids.begin() + reuse, ids.end());
  // Images and videos: the prefilled part goes in as embeddings, their rows taken from the items'.
  std::vector<float> embeddings;
  if (std::any_of(tags.begin() + reuse, tags.end(), [](int64_t t) { return t >= 0; })) {
    const int64_t H = engine_.config.text.hidden_size;
    embeddings.resize(rest.size() * size_t(H));
    engine_.model->embed(rest.data(), int64_t(rest.size()), embeddings.data());
    int64_t start = 0;  // first position of the current image's segment
    for (int64_t p = 0; p < n; ++p) {
      if (tags[size_t(p)] < 0) continue;
      if (p == 0 || tags[size_t(p - 1)] != tags[size_t(p)]) start = p;
      if (p < reuse) continue;
      const Image* img = image_by_serial(tags[size_t(p)]);
      M3_CHECK(img != nullptr, "chat: image ", tags[size_t(p)], " is not in the conversation");
      std::memcpy(embeddings.data() + (p - reuse) * H, img->features.data() + (p - start) * H,
                  sizeof(float) * size_t(H));
    }
  }

  const Tokenizer& tok = *engine_.tokenizer;
  chat::ThinkingBudget budget(chat::ThinkingMarkers::from_tokenizer(tok), opt_.max_reasoning_tokens, opens_reasoning);
  GenerateOptions gopt;
  gopt.max_new_tokens = opt_.max_tokens;
  gopt.prefill_chunk = opt_.prefill_chunk;
  gopt.sampling = opt_.sampling;
  gopt.sample_vocab = tok.vocab_size();
  gopt.thinking_budget = &budget;
  if (!embeddings.empty()) gopt.prompt_embeddings = embeddings.data();
  const int32_t eos = tok.require_token(chat::kTurnEnd);
  if (opt_.stop_at_eos) gopt.stop_tokens.push_back(eos);

  chat::OutputParserOptions popt;
  popt.starts_in_reasoning = opens_reasoning;
  popt.tools = opt_.tools;
  chat::OutputParser parser(popt);
  StreamingDecoder decoder(tok);  // special tokens kept: the parser needs the markers
  auto emit = [&](const std::vector<chat::ChatDelta>& ds) {
    if (cb.on_delta)
      for (const auto& d : ds) cb.on_delta(d);
  };
  std::vector<int32_t> generated;
  bool prefill_interrupted = false;
  GenerateStats gs;
  try {
    gs = generate(
        *engine_.model, cache_, rest, gopt,
        [&](int32_t id) {
          generated.push_back(id);
          if (!(opt_.stop_at_eos && id == eos)) emit(parser.push(decoder.push(id)));
          if (interrupt.load()) {
            stats.interrupted = true;
            return false;
          }
          return true;
        },
        [&](int64_t done, int64_t total) {
          if (interrupt.load() && done < total) throw PrefillInterrupted{};
          if (done == total && cb.on_decode_start) cb.on_decode_start();
        });
  } catch (const PrefillInterrupted&) {
    prefill_interrupted = true;
  } catch (...) {
    // The cache may hold half a forward pass: start the next turn from nothing.
    cache_.truncate(0);
    cached_ids_.clear();
    cached_tags_.clear();
    drop_turn();
    throw;
  }

  // What the cache holds now: the prompt, then every generated token that was fed back (all but
  // the last one).
  cached_ids_ = ids;
  cached_tags_ = tags;
  cached_ids_.insert(cached_ids_.end(), generated.begin(), generated.end());
  cached_tags_.insert(cached_tags_.end(), generated.size(), -1);
  M3_CHECK(cache_.length() <= int64_t(cached_ids_.size()), "chat: the cache holds more tokens than were fed");
  cached_ids_.resize(size_t(cache_.length()));
  cached_tags_.resize(size_t(cache_.length()));

  if (prefill_interrupted) {
    stats.interrupted = true;
    stats.prefilled_tokens = cache_.length() - reuse;  // the chunks done stay cached for the next turn
    drop_turn();
    return {};
  }
  emit(parser.push(decoder.flush()));
  emit(parser.finish());
  stats.generated_tokens = gs.generated_tokens;
  stats.forced_tokens = gs.forced_tokens;
  stats.reasoning_tokens = budget.reasoning_tokens();
  stats.prefill_seconds = gs.prefill_seconds;
  stats.decode_seconds = gs.decode_seconds;
  stats.decode_tokens_per_second = gs.decode_tokens_per_second();
  stats.stopped_at_eos = gs.stopped_by_token;

  chat::ParsedMessage msg = parser.message();
  messages_.push_back(msg.to_json());

  last_ids_ = ids;
  last_tags_ = tags;
  if (!generated.empty() && generated.back() == eos) generated.pop_back();
  last_ids_.insert(last_ids_.end(), generated.begin(), generated.end());
  last_tags_.insert(last_tags_.end(), generated.size(), -1);
  chat::ChatTemplateOptions topt;
  topt.thinking_mode = opt_.thinking_mode;
  topt.add_generation_prompt = false;
  last_text_ = chat::render_chat(messages_, opt_.tools, topt).text();
  last_images_ = images_.size();
  have_last_ = true;
  return msg;
}

}  // namespace m3::cli
