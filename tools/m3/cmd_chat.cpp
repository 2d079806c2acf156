// m3 chat: an interactive terminal chat on the engine (docs/CHAT.md). Reads one message per line
// from stdin (a terminal or a pipe), streams the reply, reuses the KV cache across turns.
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <string>

#include "m3/error.h"
#include "m3/chat/chat_template.h"
#include "m3/chat/thinking_budget.h"
#include "cache_type.h"
#include "chat_session.h"
#include "commands.h"
#include "sampling_options.h"
#include "read_ids.h"
#include "interrupt.h"
#include "line_reader.h"
#include "m3/version.h"
#include "run_options.h"
#include "usage.h"

namespace m3::cli {

namespace {

constexpr const char* kDim = "\x1b[2m";
constexpr const char* kBold = "\x1b[1m";
constexpr const char* kReset = "\x1b[0m";

void out(const std::string& s) {
  std::fwrite(s.data(), 1, s.size(), stdout);
  std::fflush(stdout);
}

// Prints a reply as it streams: reasoning dimmed (or bracketed without color), content plain,
// tool calls gathered and pretty-printed once complete.
class ReplyPrinter {
 public:
  explicit ReplyPrinter(bool color) : color_(color) {}

  void delta(const chat::ChatDelta& d) {
    if (!d.reasoning_content.empty()) {
      if (!in_reasoning_) {
        out(color_ ? std::string(kDim) : std::string("[thinking]\n"));
        in_reasoning_ = true;
      }
      out(d.reasoning_content);
    }
    if (!d.content.empty()) {
      end_reasoning();
      out(d.content);
      wrote_content_ = true;
    }
    if (!d.tool_calls.empty()) end_reasoning();
  }

  void finish(const chat::ParsedMessage& msg) {
    end_reasoning();
    for (const auto& call : msg.tool_calls) {
      if (wrote_content_) out("\n");
      std::string args = call.arguments;
      try {
        args = chat::Json::parse(call.arguments).dump(2);
      } catch (const std::exception&) {
        // Left as written: the parser closes truncated calls, so this is only a safety net.
      }
      out(std::string(color_ ? kBold : "") + "[tool call] " + call.name + (color_ ? kReset : "") + " " + args +
          (call.complete ? "" : " (truncated)"));
      wrote_content_ = true;
    }
    out("\n");
  }

 private:
  void end_reasoning() {
    if (!in_reasoning_) return;
    out(color_ ? std::string(kReset) + "\n" : std::string("\n[/thinking]\n"));
    in_reasoning_ = false;
  }

  bool color_;
  bool in_reasoning_ = false;
  bool wrote_content_ = false;
};

void print_help() {
  out("commands:\n"
      "  /image PATH   attach an image to the next message\n"
      "  /video PATH   attach a video to the next message\n"
      "  /tool TEXT    answer the last reply's tool call(s) with a result (needs --tools)\n"
      "  /clear        start a new conversation\n"
      "  /set          show the sampling settings; /set temp|top-p|top-k|min-p|repeat-penalty|seed|max-tokens VALUE\n"
      "  /show         the model, context, threads, cache, CPU path and this conversation\n"
      "  /save FILE    write the conversation as OpenAI messages JSON\n"
      "  /load FILE    continue a saved conversation (its cached prefix is reused)\n"
      "  /exit         quit (also EOF, or Ctrl-C at the prompt)\n"
      "  /help         this text\n"
      "Ctrl-C while a reply streams stops it. A line ending in \\ continues on the next line; a line of \"\"\" opens\n"
      "a block that ends at the next \"\"\". In a terminal: arrows edit, Up/Down walk the history (kept across runs),\n"
      "Ctrl-R searches it.\n");
}

chat::Json stats_json(const ChatTurnStats& s, const chat::ParsedMessage& m) {
  chat::Json tool_calls = chat::Json::array();
  for (const auto& c : m.tool_calls) tool_calls.push_back({{"name", c.name}, {"arguments", c.arguments}});
  return {{"turn", s.turn},
          {"prompt_tokens", s.prompt_tokens},
          {"reused_tokens", s.reused_tokens},
          {"prefilled_tokens", s.prefilled_tokens},
          {"generated_tokens", s.generated_tokens},
          {"forced_tokens", s.forced_tokens},
          {"reasoning_tokens", s.reasoning_tokens},
          {"stopped_at_eos", s.stopped_at_eos},
          {"interrupted", s.interrupted},
          {"prefill_seconds", s.prefill_seconds},
          {"decode_tokens_per_second", s.decode_tokens_per_second},
          {"content", m.content},
          {"reasoning_content", m.reasoning_content},
          {"tool_calls", tool_calls}};
}

// /set NAME VALUE on a copy of the settings; "" or an error message.
std::string apply_setting(const std::string& name, const std::string& value, SamplingParams& s, int& max_tokens) {
  char* end = nullptr;
  const double v = std::strtod(value.c_str(), &end);
  if (value.empty() || end != value.c_str() + value.size()) return "/set " + name + ": expected a number, got '" + value + "'";
  if (name == "temp" || name == "temperature") s.temperature = float(v);
  else if (name == "top-p" || name == "top_p") s.top_p = float(v);
  else if (name == "top-k" || name == "top_k") s.top_k = int(v);
  else if (name == "min-p" || name == "min_p") s.min_p = float(v);
  else if (name == "repeat-penalty") s.repetition_penalty = float(v);
  else if (name == "seed") s.seed = uint64_t(v);
  else if (name == "max-tokens" || name == "n") max_tokens = int(v);
  else return "/set: unknown setting '" + name + "' (temp, top-p, top-k, min-p, repeat-penalty, seed, max-tokens)";
  if (max_tokens < 0) return "/set max-tokens: expected a value >= 0";
  try {
    s.validate();
  } catch (const Error& e) {
    return std::string("/set: ") + e.what();
  }
  return "";
}

std::string settings_text(const SamplingParams& s, int max_tokens) {
  char buf[256];
  std::snprintf(buf, sizeof buf, "temp %g, top-p %g, top-k %d, min-p %g, repeat-penalty %g, seed %llu, max-tokens %d\n",
                s.temperature, s.top_p, s.top_k, s.min_p, s.repetition_penalty, (unsigned long long)s.seed, max_tokens);
  return buf;
}

}  // namespace

void register_chat(CLI::App& app) {
  struct Args {
    RunOptions run;
    std::string system, effort, tools, color = "auto";
    std::vector<std::string> images, videos;
    int chunk = 512, max_tokens = 2048;
    bool stats_json = false, ignore_eos = false, no_reuse = false;
    std::string history_file = default_history_file();
    SamplingParams s;
  };
  auto a = std::make_shared<Args>();
  CLI::App* cmd = app.add_subcommand("chat", "Interactive chat in the terminal (multi-turn, KV reuse, images and video)");
  add_run_options(cmd, a->run, "Context: the conversation's tokens, replies included (default: the model's max_position_embeddings)");
  cmd->add_option("--system", a->system, "System prompt");
  cmd->add_option("--tools", a->tools, "JSON file with OpenAI tools ([{\"type\":\"function\",\"function\":{...}}])");
  cmd->add_option("--reasoning-effort", a->effort,
                  "none | minimal | low | medium | high | xhigh | a reasoning token budget (default: the "
                  "template's adaptive mode, no cap)");
  cmd->add_option("-n,--max-tokens", a->max_tokens, "Most tokens per reply")->capture_default_str()->check(NonNegative());
  cmd->add_option("-b,--chunk", a->chunk, "Prefill chunk (tokens per forward pass)")->capture_default_str()->check(Positive());
  add_sampling_options(cmd, a->s);
  cmd->add_option("--image", a->images, "Image for the first message (repeatable; see also /image)");
  cmd->add_option("--video", a->videos, "Video for the first message, after the images (repeatable; see also /video)");
  cmd->add_option("--color", a->color, "Dim reasoning with ANSI colors: auto (when stdout is a terminal) | always | never")
      ->capture_default_str()
      ->check(CLI::IsMember({"auto", "always", "never"}));
  cmd->add_flag("--stats-json", a->stats_json, "After each reply, one JSON line of statistics on stderr");
  cmd->add_flag("--ignore-eos", a->ignore_eos, "Do not stop at the end-of-turn token");
  cmd->add_flag("--no-kv-reuse", a->no_reuse, "Prefill the whole conversation every turn");
  cmd->add_option("--history-file", a->history_file, "Where the input history is kept across runs (\"\": none)")
      ->capture_default_str();
  cmd->callback([a, cmd] {
    start_run(a->run);
    ChatSessionOptions o;
    o.system = a->system;
    o.cache_type = run_cache_type(a->run);
    o.context = a->run.ctx_size;
    if (!a->tools.empty()) {
      try {
        o.tools = chat::Json::parse(read_text_file(a->tools));
      } catch (const chat::Json::parse_error& e) {
        fail(a->tools, ": not valid JSON: ", e.what());
      }
      M3_CHECK(o.tools.is_array(), a->tools, ": expected a JSON array of tools");
      try {
        // Malformed definitions fail now, not at every turn.
        chat::Json probe = chat::Json::array();
        probe.push_back({{"role", "user"}, {"content", ""}});
        chat::render_chat(probe, o.tools);
      } catch (const Error& e) {
        fail(a->tools, ": ", e.what());
      }
    }
    if (!a->effort.empty()) {
      const chat::ThinkingEffort e = chat::parse_reasoning_effort(a->effort, "--reasoning-effort");
      o.thinking_mode = e.mode;
      o.max_reasoning_tokens = e.max_reasoning_tokens;
    }
    o.max_tokens = a->max_tokens;
    o.prefill_chunk = a->chunk;
    o.stop_at_eos = !a->ignore_eos;
    o.reuse_kv = !a->no_reuse;
    const bool color = a->color == "always" || (a->color == "auto" && isatty(STDOUT_FILENO));
    const bool interactive = isatty(STDIN_FILENO);

    auto engine = load_engine(a->run, false);
    o.sampling = resolve_sampling(cmd, a->s, engine->info().default_sampling);
    ChatSession session(*engine, o);
    for (const auto& path : a->images) session.attach_image(path);
    for (const auto& path : a->videos) session.attach_video(path);
    std::atomic<bool>& interrupt = install_sigint_flag(SigintMode::EveryTimeEINTR);
    if (interactive) {
      const ModelInfo& mi = engine->info();
      const long long ctx = (long long)session.context();
      char banner[512];
      std::snprintf(banner, sizeof banner,
                    "m3 chat: %s | %d layers, %s parameters%s | context %lld | %d threads | cache %s | "
                    "temp %.2f top-p %.2f top-k %d\ntype a message, /help for commands.\n",
                    a->run.model.c_str(), mi.layers, parameter_count(mi.parameters).c_str(), mi.has_vision ? ", vision" : "", ctx,
                    mi.threads, cache_type_name(o.cache_type), o.sampling.temperature, o.sampling.top_p, o.sampling.top_k);
      out(banner);
    }

    LineReader reader(a->history_file, interactive);
    // libedit measures the prompt: the color codes are marked invisible (\1 ... \1 with RL_PROMPT_START_IGNORE).
    const std::string prompt = interactive ? (color ? std::string("\1") + kBold + "\1> \1" + kReset + "\1" : std::string("> ")) : "";
    const std::string more = interactive ? "... " : "";
    std::string line;
    while (true) {
      interrupt.store(false);
      if (!reader.read_message(prompt, more, line)) {
        if (interactive) out("\n");
        break;
      }
      if (line.empty()) continue;
      std::string role = "user";
      if (line[0] == '/') {
        const size_t sp = std::min(line.find(' '), line.size());
        const std::string name = line.substr(0, sp);
        const size_t arg_at = line.find_first_not_of(' ', sp);
        const std::string arg = arg_at == std::string::npos ? "" : line.substr(arg_at);
        if (name == "/exit" || name == "/quit") break;
        if (name == "/help") {
          print_help();
        } else if (name == "/set") {
          SamplingParams sp_now = session.sampling();
          int n = session.max_tokens();
          if (!arg.empty()) {
            const size_t cut = std::min(arg.find(' '), arg.size());
            const size_t val_at = arg.find_first_not_of(' ', cut);
            const std::string err = apply_setting(arg.substr(0, cut), val_at == std::string::npos ? "" : arg.substr(val_at), sp_now, n);
            if (!err.empty()) {
              out(err + "\n");
              continue;
            }
            session.set_sampling(sp_now);
            session.set_max_tokens(n);
          }
          out(settings_text(session.sampling(), session.max_tokens()));
        } else if (name == "/show") {
          const ModelInfo& mi = engine->info();
          const CpuPathInfo cpu = cpu_path_info();
          char buf[768];
          std::snprintf(buf, sizeof buf,
                        "model %s: %d layers, hidden %lld, %s parameters (%s)%s\n"
                        "context %lld tokens, %d threads, cache %s, CPU path %s\n"
                        "conversation: %zu messages, %lld tokens cached\n",
                        a->run.model.c_str(), mi.layers, (long long)mi.hidden_size, parameter_count(mi.parameters).c_str(),
                        mi.weight_dtypes.c_str(), mi.has_vision ? ", vision" : "", (long long)session.context(), mi.threads,
                        cache_type_name(o.cache_type), cpu.active.c_str(), session.messages().size(),
                        (long long)session.cached_tokens());
          out(buf + settings_text(session.sampling(), session.max_tokens()));
        } else if (name == "/save" || name == "/load") {
          if (arg.empty()) {
            out("usage: " + name + " FILE\n");
            continue;
          }
          try {
            if (name == "/save") {
              std::ofstream f(arg, std::ios::binary);
              f << session.messages().dump(2) << "\n";
              M3_CHECK(f.good(), arg, ": cannot write");
              out("(saved " + std::to_string(session.messages().size()) + " messages to " + arg + ")\n");
            } else {
              chat::Json doc;
              try {
                doc = chat::Json::parse(read_text_file(arg));
              } catch (const chat::Json::parse_error& e) {
                fail(arg, ": not valid JSON: ", e.what());
              }
              if (doc.is_object() && doc.contains("messages")) doc = doc["messages"];
              session.load_messages(doc);
              out("(loaded " + std::to_string(session.messages().size()) + " messages from " + arg + ")\n");
            }
          } catch (const Error& e) {
            out(std::string("error: ") + e.what() + "\n");
          }
        } else if (name == "/clear") {
          session.clear();
          out("(new conversation)\n");
        } else if (name == "/image" || name == "/video") {
          const std::string what = name.substr(1);
          if (arg.empty()) {
            out("usage: " + name + " PATH\n");
            continue;
          }
          try {
            if (what == "video") session.attach_video(arg);
            else session.attach_image(arg);
            out("(" + what + " attached to the next message: " + arg + ")\n");
          } catch (const Error& e) {
            out(std::string("error: ") + e.what() + "\n");
          }
        } else if (name == "/tool") {
          role = "tool";
          line = arg;
        } else {
          out("unknown command " + name + " (/help lists them)\n");
        }
        if (role != "tool") continue;
      }

      ReplyPrinter printer(color);
      ChatTurnCallbacks cb;
      cb.on_delta = [&](const chat::ChatDelta& d) { printer.delta(d); };
      if (a->stats_json)
        cb.on_decode_start = [] {
          std::fprintf(stderr, "{\"event\":\"decoding\"}\n");
          std::fflush(stderr);
        };
      ChatTurnStats st;
      chat::ParsedMessage msg;
      try {
        msg = session.turn(role, line, cb, interrupt, st);
      } catch (const Error& e) {
        out(std::string(color ? kReset : "") + "\nerror: " + e.what() + "\n");
        continue;
      }
      printer.finish(msg);
      char summary[256];
      std::snprintf(summary, sizeof summary, "[%lld prompt tokens: %lld reused, %lld prefilled | %lld tokens, %.1f t/s%s]",
                    (long long)st.prompt_tokens, (long long)st.reused_tokens, (long long)st.prefilled_tokens,
                    (long long)st.generated_tokens, st.decode_tokens_per_second, st.interrupted ? " | interrupted" : "");
      // Statistics go to stderr: a reply piped to a file or a program is the reply alone.
      std::fprintf(stderr, "%s\n", color ? (std::string(kDim) + summary + kReset).c_str() : summary);
      std::fflush(stderr);
      if (a->stats_json) {
        std::fprintf(stderr, "%s\n", stats_json(st, msg).dump().c_str());
        std::fflush(stderr);
      }
    }
  });
}

}  // namespace m3::cli
