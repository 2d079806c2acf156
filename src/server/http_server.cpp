#include "server/http_server.h"

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <cerrno>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <ctime>
#include <deque>
#include <filesystem>
#include <mutex>
#include <random>
#include <thread>

#include "m3/error.h"
#include "m3/chat/chat_template.h"
#include "m3/chat/output_parser.h"
#include "m3/engine.h"
#include "m3/tokenizer.h"
#include "m3/version.h"
#include "server/api_error.h"
#include "server/cors.h"
#include "server/http_connection.h"
#include "server/json_text.h"
#include "server/media.h"
#include "server/metrics.h"
#include "server/request.h"
#include "server/web_assets.h"
#include "server/scheduler.h"

namespace m3::server {

namespace {

std::string random_hex(size_t n) {
  static std::mutex mu;
  static std::mt19937_64 rng{std::random_device{}()};
  std::lock_guard<std::mutex> lk(mu);
  static const char* digits = "0123456789abcdef";
  std::string s(n, '0');
  for (auto& c : s) c = digits[rng() % 16];
  return s;
}

uint64_t random_seed() {
  static std::mutex mu;
  static std::mt19937_64 rng{std::random_device{}()};
  std::lock_guard<std::mutex> lk(mu);
  return rng();
}


int64_t now_seconds() {
  return std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
}

bool send_json(HttpResponder& res, int status, const Json& j) { return res.send(status, "application/json", dump(j)); }

class Server {
 public:
  explicit Server(const ServerOptions& o) : opt_(o) {
    EngineOptions eo;
    eo.threads = o.threads;
    eo.mmap = o.mmap;
    eo.mlock = o.mlock;
    engine_ = Engine::load(o.model_dir, eo);
    const int64_t max_pos = engine_->info().max_position;
    ctx_ = o.ctx > 0 ? o.ctx : std::min<int64_t>(32768, max_pos > 0 ? max_pos : 32768);
    if (max_pos > 0) M3_CHECK(ctx_ <= max_pos, "-c/--ctx-size ", ctx_, " exceeds the model's max_position_embeddings ", max_pos);
    M3_CHECK(o.prefill_chunk > 0, "--chunk must be > 0");
    engine_->tokenizer().require_token(chat::kTurnEnd);  // the chat template ends turns with it
    model_name_ = o.model_name;
    if (model_name_.empty()) {
      std::filesystem::path p(o.model_dir);
      if (!p.has_filename()) p = p.parent_path();
      model_name_ = p.filename().string();
      if (model_name_.empty()) model_name_ = "m3";
    }
    media_.allowed_local_dir = o.allowed_local_media_path;
    M3_CHECK(o.parallel >= 1, "--parallel must be >= 1, got ", o.parallel);
    SchedulerOptions so;
    so.parallel = o.parallel;
    so.chunk = std::max(o.prefill_chunk, o.parallel);
    so.cache_type = o.cache_type;
    so.prefix_cache_bytes = o.cache_mb << 20;
    sample_vocab_ = engine_->info().sample_vocab;
    scheduler_ = std::make_unique<Scheduler>(*engine_, metrics_, so);
  }

  void serve() {
    HttpLimits limits;
    limits.max_body_bytes = opt_.max_body_bytes;
    // A client that stops sending its request, or stops reading its stream, is dropped after this
    // long (its generation is cancelled and its slot freed).
    limits.timeout_seconds = opt_.timeout_seconds;
    limits.idle_seconds = std::min(5, opt_.timeout_seconds);
    limits.max_connections = std::max(4, opt_.http_threads);
    HttpListener http(opt_.host, opt_.port, limits);
    const ModelInfo& mi = engine_->info();
    const CpuPathInfo cpu = cpu_path_info();
    std::fprintf(stderr, "m3 serve: m3.cpp %s (%s), CPU path %s (best %s)\n", build_info().version.c_str(),
                 build_info().commit.c_str(), cpu.active.c_str(), cpu.best.c_str());
    const bool billions = mi.parameters >= 1000000000;
    std::fprintf(stderr, "m3 serve: model %s: %d layers, %.2f%s parameters, %.2f GiB of weights (%s, %s), loaded in %.2f s\n",
                 model_name_.c_str(), mi.layers, mi.parameters / (billions ? 1e9 : 1e6), billions ? "B" : "M",
                 mi.weight_bytes / double(1ull << 30),
                 mi.weight_dtypes.c_str(), mi.weights_mapped ? (mi.weights_locked ? "mapped, locked" : "mapped") : "in memory",
                 mi.load_seconds);
    std::fprintf(stderr, "m3 serve: model %s, context %lld tokens, %d parallel sequences, %d threads, %s KV cache, prefix cache %llu MiB\n",
                 model_name_.c_str(), (long long)ctx_, opt_.parallel, engine_->info().threads,
                 std::string(dtype_name(opt_.cache_type)).c_str(), (unsigned long long)opt_.cache_mb);
    std::fprintf(stderr, "m3 serve: listening on http://%s:%d\n", opt_.host.c_str(), http.port());
    std::fflush(stderr);
    listener_.store(&http);
    if (stopping_.load()) http.stop();  // a signal came before the listener existed
    http.serve([this](const HttpRequest& req, HttpResponder& res) {
                 // Counted while the handler runs, also when it throws (the connection answers 500).
                 struct InFlight {
                   std::atomic<int>& n;
                   explicit InFlight(std::atomic<int>& c) : n(c) { n.fetch_add(1); }
                   ~InFlight() { n.fetch_sub(1); }
                 } counted(in_flight_);
                 route(req, res);
               },
               [this](const HttpLogEntry& e) {
                 static const char* known[] = {"/v1/chat/completions", "/v1/completions", "/v1/models", "/health", "/metrics"};
                 std::string ep = "other";
                 for (const char* k : known)
                   if (e.path == k) ep = k;
                 metrics_.count_request(ep, e.status);
                 // One line per request: UTC time, method, path, status, duration, and for
                 // generations the tokens and the time to the first one.
                 const auto now = std::chrono::system_clock::now();
                 const std::time_t t = std::chrono::system_clock::to_time_t(now);
                 const int ms = int(std::chrono::duration_cast<std::chrono::milliseconds>(now.time_since_epoch()).count() % 1000);
                 std::tm tm{};
                 gmtime_r(&t, &tm);
                 char stamp[32];
                 std::strftime(stamp, sizeof stamp, "%Y-%m-%dT%H:%M:%S", &tm);
                 std::fprintf(stderr, "m3 serve: %s.%03dZ %s %s %d %.3f s%s%s\n", stamp, ms, e.method.c_str(), e.path.c_str(),
                              e.status, e.seconds, e.note.empty() ? "" : " ", e.note.c_str());
               });
    finish_shutdown();
  }

  // SIGINT or SIGTERM (from the signal thread): stop accepting; serve() then finishes the rest.
  void begin_shutdown(const char* signal_name) {
    if (stopping_.exchange(true)) return;
    shutdown_started_ = std::chrono::steady_clock::now();
    std::fprintf(stderr, "m3 serve: %s: no new connections; %d request(s) in flight get up to %d s to finish (--shutdown-grace)\n",
                 signal_name, in_flight_.load(), opt_.shutdown_grace_seconds);
    std::fflush(stderr);
    if (HttpListener* l = listener_.load()) l->stop();
  }

 private:
  // After the listener stopped: in-flight requests finish within the grace period; past it the
  // scheduler ends them with a 503 final event. Then the process exits 0 with every answer
  // written. It exits here rather than unwinding: threads of idle kept-alive connections still
  // wait on their sockets, and nothing they hold needs a destructor.
  void finish_shutdown() {
    auto wait_idle = [&](std::chrono::steady_clock::time_point until) {
      while (in_flight_.load() > 0 && std::chrono::steady_clock::now() < until)
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
      return in_flight_.load() == 0;
    };
    const auto grace_end = shutdown_started_ + std::chrono::seconds(opt_.shutdown_grace_seconds);
    if (!wait_idle(grace_end)) {
      std::fprintf(stderr, "m3 serve: grace period over: ending %d request(s) with 503 server_shutting_down\n", in_flight_.load());
      scheduler_->abort_all();
      wait_idle(std::chrono::steady_clock::now() + std::chrono::seconds(10));
    }
    std::fprintf(stderr, "m3 serve: stopped\n");
    std::fflush(nullptr);
    std::_Exit(in_flight_.load() == 0 ? 0 : 1);
  }

  void route(const HttpRequest& req, HttpResponder& res) {
    // CORS first: a preflight carries no API key, and every answer to an allowed origin (errors
    // included) must name it, or the browser hides the answer from the page.
    const CorsDecision cors = cors_decide(opt_.cors_origins, req.header("Origin"), req.header("Host"));
    if (cors == CorsDecision::Refused) {
      send_json(res, 403, error_body("origin " + req.header("Origin") + " is not allowed: start the server with --cors-origin",
                                     "invalid_request_error", {}, "origin_not_allowed"));
      return;
    }
    if (cors == CorsDecision::Allowed) {
      res.add_header("Access-Control-Allow-Origin", req.header("Origin"));
      res.add_header("Vary", "Origin");
    }
    const std::string allow = allowed_methods(req.path);
    if (req.method == "OPTIONS") {
      HttpHeaders h = {{"Allow", allow.empty() ? "OPTIONS" : allow + ", OPTIONS"}};
      if (cors == CorsDecision::Allowed) {
        h.emplace_back("Access-Control-Allow-Methods", "GET, POST, OPTIONS");
        const std::string asked = req.header("Access-Control-Request-Headers");
        h.emplace_back("Access-Control-Allow-Headers", asked.empty() ? "Authorization, Content-Type" : asked);
        h.emplace_back("Access-Control-Max-Age", "600");
      }
      res.send(204, "text/plain", "", h);
      return;
    }
    // The chat page needs no API key: it asks the user for one (and keeps it in the browser).
    if (req.method == "GET") {
      if (const WebAsset* page = find_web_asset(req.path)) {
        res.send(200, page->content_type, std::string_view(reinterpret_cast<const char*>(page->data), page->size),
                 {{"Cache-Control", "no-cache"},
                  {"X-Content-Type-Options", "nosniff"},
                  {"Content-Security-Policy", "default-src 'self'; img-src 'self' data: blob:; media-src 'self' data: blob:"}});
        return;
      }
    }
    if (stopping_.load() && req.path != "/health") {
      send_json(res, 503, error_body("the server is shutting down", "server_error", {}, "server_shutting_down"));
      return;
    }
    if (!opt_.api_key.empty() && req.path != "/health") {
      const std::string auth = req.header("Authorization");
      if (auth != "Bearer " + opt_.api_key) {
        send_json(res, 401,
                  error_body(auth.empty() ? "missing API key: send \"Authorization: Bearer KEY\"" : "invalid API key",
                             "invalid_request_error", {}, "invalid_api_key"));
        return;
      }
    }
    if (allow.empty()) {
      send_json(res, 404, error_body("unknown path: " + req.method + " " + req.path, "invalid_request_error", {}, "not_found"));
      return;
    }
    if (allow != req.method) {
      res.send(405, "application/json",
               dump(error_body(req.method + " is not allowed on " + req.path + " (allowed: " + allow + ")",
                               "invalid_request_error", {}, "method_not_allowed")),
               {{"Allow", allow + ", OPTIONS"}});
      return;
    }
    if (req.path == "/health") {
      send_json(res, 200, Json{{"status", stopping_.load() ? "shutting_down" : "ok"}});
    } else if (req.path == "/metrics") {
      res.send(200, "text/plain; version=0.0.4", metrics_.render());
    } else if (req.path == "/v1/models") {
      send_json(res, 200, Json{{"object", "list"}, {"data", Json::array({model_object()})}});
    } else if (req.path.rfind("/v1/models/", 0) == 0) {
      const std::string id = req.path.substr(std::string("/v1/models/").size());
      if (id != model_name_) {
        send_json(res, 404, model_not_found(id));
        return;
      }
      send_json(res, 200, model_object());
    } else if (req.path == "/v1/chat/completions") {
      handle(req, res, Endpoint::Chat);
    } else {
      handle(req, res, Endpoint::Completion);
    }
  }

  // The method a path answers ("" for an unknown path).
  static std::string allowed_methods(const std::string& path) {
    if (find_web_asset(path) != nullptr) return "GET";
    if (path == "/health" || path == "/metrics" || path == "/v1/models") return "GET";
    if (path.rfind("/v1/models/", 0) == 0 && path.size() > std::string("/v1/models/").size()) return "GET";
    if (path == "/v1/chat/completions" || path == "/v1/completions") return "POST";
    return "";
  }

  Json model_object() const {
    return {{"id", model_name_}, {"object", "model"}, {"created", started_}, {"owned_by", "m3.cpp"}, {"context_length", ctx_}};
  }

  static Json model_not_found(const std::string& id) {
    return error_body("The model `" + id + "` does not exist (this server serves one model; see GET /v1/models)",
                      "invalid_request_error", "model", "model_not_found");
  }

  void handle(const HttpRequest& req, HttpResponder& res, Endpoint endpoint) {
    std::shared_ptr<Job> job;
    try {
      job = prepare(req.body, endpoint);
    } catch (const ApiError& e) {
      send_json(res, e.status, error_body(e));
      return;
    }
    auto ex = std::make_shared<Exchange>();
    const int n = job->gen.n;
    auto group = n > 1 ? std::make_shared<ChoiceGroup>(n) : nullptr;
    std::vector<std::unique_ptr<Generation>> choices;
    for (int i = 0; i < n; ++i)
      choices.push_back(std::make_unique<Generation>(job, ex, engine_->tokenizer(), sample_vocab_, i, group));
    scheduler_->submit(std::move(choices));
    // While the answer is pending the connection is polled: a client that leaves cancels its
    // generation (the scheduler retires it after the current step).
    if (!job->gen.stream) {
      std::unique_lock<std::mutex> lk(ex->mu);
      while (!ex->cv.wait_for(lk, std::chrono::milliseconds(100), [&] { return ex->done; }))
        if (res.peer_closed()) ex->cancelled = true;  // the scheduler ends it; the answer goes nowhere
      const int status = ex->status;
      const std::string body = std::move(ex->body);
      res.set_log_note(log_note(*ex));
      lk.unlock();
      res.send(status, "application/json", body);
      return;
    }
    if (!res.begin_stream(200, "text/event-stream", {{"Cache-Control", "no-cache"}})) {
      ex->cancelled = true;
      return;
    }
    std::unique_lock<std::mutex> lk(ex->mu);
    for (;;) {
      ex->cv.wait_for(lk, std::chrono::milliseconds(500), [&] { return !ex->events.empty() || ex->done; });
      while (!ex->events.empty()) {
        std::string e = std::move(ex->events.front());
        ex->events.pop_front();
        lk.unlock();
        if (!res.write_stream(e)) {
          ex->cancelled = true;
          return;
        }
        lk.lock();
      }
      if (ex->done) {
        res.set_log_note(log_note(*ex) + " (stream)");
        lk.unlock();
        res.end_stream();
        return;
      }
      if (res.peer_closed()) {  // e.g. during a long prefill, when no write would fail
        ex->cancelled = true;
        return;
      }
    }
  }

  // "prompt 120 (cached 96), generated 20, ttft 0.081 s" for the access log (ex->mu held).
  static std::string log_note(const Exchange& ex) {
    char buf[160];
    std::snprintf(buf, sizeof buf, "prompt %lld (cached %lld), generated %lld", (long long)ex.prompt_tokens,
                  (long long)ex.cached_tokens, (long long)ex.generated_tokens);
    std::string note = buf;
    if (ex.time_to_first_token >= 0) {
      std::snprintf(buf, sizeof buf, ", ttft %.3f s", ex.time_to_first_token);
      note += buf;
    }
    return note;
  }

  // Parses, renders and tokenizes the request (HTTP thread; the tokenizer is thread-safe).
  std::shared_ptr<Job> prepare(const std::string& body, Endpoint endpoint) {
    const Json j = parse_json_body(body, opt_.max_json_depth);
    auto job = std::make_shared<Job>();
    job->endpoint = endpoint;
    job->created = now_seconds();
    const Tokenizer& tok = engine_->tokenizer();
    if (endpoint == Endpoint::Chat) {
      ChatRequest r = parse_chat_request(j, random_seed(), engine_->info().default_sampling);
      check_model(r.gen.model);
      check_token_ids(r.gen, sample_vocab_);
      chat::RenderedPrompt prompt;
      try {
        chat::ChatTemplateOptions topt;
        topt.thinking_mode = r.thinking_mode;
        prompt = chat::render_chat(r.messages, r.tools, topt);
      } catch (const Error& e) {
        throw ApiError(400, e.what(), param_of_error_message(e.what()));
      }
      const std::vector<int32_t> ids = chat::tokenize(tok, prompt);
      if (prompt.media.empty()) {
        job->prompt.append_tokens(ids);
      } else {
        if (!engine_->info().has_vision) {
          const auto& m = prompt.media.front();
          throw ApiError(400, "this model has no vision tower: image parts cannot be used",
                         str_cat("messages[", m.message_index, "].content[", m.part_index, "]"), "unsupported_content");
        }
        // The vision tower runs here, on the HTTP thread: the shared thread pool interleaves it
        // with the scheduler's forward passes.
        job->prompt = build_media_prompt(*engine_, ids, prompt.media, media_);
      }
      job->opens_reasoning = prompt.opens_reasoning;
      job->may_open_reasoning = r.thinking_mode == chat::ThinkingMode::Adaptive;
      job->forced_text = forced_tool_prefix(r.tool_choice, r.thinking_mode);
      job->max_reasoning_tokens = r.max_reasoning_tokens;
      // A zero reasoning budget in a prompt that opened the thought: close it right away.
      if (job->forced_text.empty() && job->opens_reasoning && r.max_reasoning_tokens == int64_t(0))
        job->forced_text = std::string(chat::kThinkClose);
      if (!job->forced_text.empty()) {
        job->prompt.append_tokens(tok.encode(job->forced_text, /*allow_special=*/true));
      }
      job->tools = r.tools;
      job->parse_tools = r.tool_choice.kind != ToolChoiceKind::None;
      job->gen = std::move(r.gen);
      job->id = "chatcmpl-" + random_hex(24);
    } else {
      CompletionRequest r = parse_completion_request(j, random_seed(), engine_->info().default_sampling);
      check_model(r.gen.model);
      check_token_ids(r.gen, sample_vocab_);
      // A raw prompt: control tokens written in it are matched (it is the caller's own markup).
      job->prompt.append_tokens(tok.encode(r.prompt, /*allow_special=*/true));
      job->gen = std::move(r.gen);
      job->id = "cmpl-" + random_hex(24);
    }
    const int64_t n = job->prompt.size();
    const char* param = endpoint == Endpoint::Chat ? "messages" : "prompt";
    if (n == 0) throw ApiError(400, "the prompt is empty", param);
    if (n >= ctx_)
      throw ApiError(400,
                     str_cat("the prompt is ", n, " tokens but the context is ", ctx_,
                             " tokens (including at least one generated token); shorten the ", param, " or start the server with a larger --ctx"),
                     param, "context_length_exceeded");
    job->max_tokens = std::min<int64_t>(job->gen.max_tokens.value_or(ctx_ - n), ctx_ - n);
    job->model = job->gen.model.empty() ? model_name_ : job->gen.model;
    return job;
  }

  // 404 for a model this server does not serve, unless --accept-any-model (llama-server's way).
  void check_model(const std::string& requested) const {
    if (requested.empty() || requested == model_name_ || opt_.accept_any_model) return;
    const Json body = model_not_found(requested);
    throw ApiError(404, body["error"]["message"].get<std::string>(), "model", "model_not_found");
  }

  ServerOptions opt_;
  std::atomic<HttpListener*> listener_{nullptr};
  std::atomic<bool> stopping_{false};
  std::atomic<int> in_flight_{0};
  std::chrono::steady_clock::time_point shutdown_started_;
  std::unique_ptr<Engine> engine_;
  int64_t ctx_ = 0;
  std::string model_name_;
  int64_t started_ = now_seconds();
  Metrics metrics_;
  MediaOptions media_;
  int sample_vocab_ = 0;
  std::unique_ptr<Scheduler> scheduler_;  // last: its thread stops before the rest is destroyed
};

}  // namespace

namespace {

// SIGINT/SIGTERM reach whichever thread the kernel picks (libraries such as OpenBLAS start
// threads before main, so blocking the signals for a sigwait thread cannot cover them all): the
// handler only writes the signal number to a pipe, which a watcher thread reads.
int g_signal_pipe[2] = {-1, -1};

extern "C" void on_stop_signal(int sig) {
  const unsigned char b = static_cast<unsigned char>(sig);
  if (::write(g_signal_pipe[1], &b, 1) < 0) { /* nothing safe to do in a handler */ }
}

}  // namespace

void run_server(const ServerOptions& options) {
  Server s(options);
  M3_CHECK(::pipe2(g_signal_pipe, O_CLOEXEC) == 0, "m3 serve: cannot create the signal pipe");
  struct sigaction sa {};
  sa.sa_handler = on_stop_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
  // The first signal starts the graceful shutdown; a second ends the process at once.
  std::thread([&s] {
    unsigned char sig = 0;
    while (::read(g_signal_pipe[0], &sig, 1) < 0 && errno == EINTR) {
    }
    s.begin_shutdown(sig == SIGINT ? "SIGINT" : "SIGTERM");
    while (::read(g_signal_pipe[0], &sig, 1) < 0 && errno == EINTR) {
    }
    std::fprintf(stderr, "m3 serve: second signal: exiting now\n");
    std::fflush(nullptr);
    std::_Exit(1);
  }).detach();
  s.serve();
}

}  // namespace m3::server
