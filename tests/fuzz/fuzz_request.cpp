// Request parser: a body as a client sends it -> parse_json_body -> parse_chat_request (then, as
// the server does, render_chat and tokenize) and parse_completion_request (then tokenize): the
// path every POST /v1/chat/completions and /v1/completions takes before the model is touched. A client error must come out as ApiError 4xx (or m3::Error, which
// the HTTP layer turns into a 400); a 5xx, a crash, a sanitizer report or any other exception is a
// finding.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string_view>

#include "m3/error.h"
#include "m3/chat/chat_template.h"
#include "fuzz_support.h"
#include "server/request.h"
#include "m3/tokenizer.h"

namespace {

// A refusal the server would answer with a 4xx: fine. Anything claiming to be a server error is
// not a refusal of bad input but a bug, so abort to make libFuzzer keep the input.
void expect_client_error(const m3::server::ApiError& e) {
  if (e.status < 400 || e.status > 499) {
    std::fprintf(stderr, "ApiError %d (not a client error): %s\n", e.status, e.what());
    std::abort();
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace m3::server;
  Json body;
  try {
    body = parse_json_body(std::string_view(reinterpret_cast<const char*>(data), size));
  } catch (const ApiError& e) {
    expect_client_error(e);
    return 0;
  }
  // The same body through both endpoints: most fields are shared, and each endpoint must refuse
  // the other's fields cleanly rather than misread them.
  try {
    ChatRequest chat = parse_chat_request(body, /*seed_if_unset=*/1);
    // What the server does next with a valid tool_choice (a prefix forced on the generation).
    (void)forced_tool_prefix(chat.tool_choice, chat.thinking_mode);
    m3::chat::ChatTemplateOptions options;
    options.thinking_mode = chat.thinking_mode;
    const m3::chat::RenderedPrompt prompt = m3::chat::render_chat(chat.messages, chat.tools, options);
    (void)m3::chat::tokenize(m3::fuzz::small_tokenizer(), prompt);
  } catch (const ApiError& e) {
    expect_client_error(e);
  } catch (const m3::Error& e) {
    (void)param_of_error_message(e.what());
  }
  try {
    const CompletionRequest completion = parse_completion_request(body, /*seed_if_unset=*/1);
    (void)m3::fuzz::small_tokenizer().encode(completion.prompt, /*allow_special=*/true);  // as the server does
  } catch (const ApiError& e) {
    expect_client_error(e);
  } catch (const m3::Error&) {
  }
  return 0;
}
