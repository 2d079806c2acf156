// The smallest program on m3.cpp's public API (include/m3/ alone; it is built without the engine's
// own headers): load a model folder, tokenize a prompt, generate greedily, print the text as it
// comes. docs/API.md walks through it.
//
//   m3-simple MODEL_DIR PROMPT [MAX_TOKENS]
#include <cstdio>
#include <cstdlib>
#include <string_view>

#include "m3/engine.h"
#include "m3/error.h"
#include "m3/prompt.h"
#include "m3/session.h"
#include "m3/tokenizer.h"

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: %s MODEL_DIR PROMPT [MAX_TOKENS]\n", argv[0]);
    return 2;
  }
  try {
    const std::unique_ptr<m3::Engine> engine = m3::Engine::load(argv[1]);

    m3::Prompt prompt;
    prompt.append_tokens(engine->tokenizer().encode(argv[2]));

    m3::GenerationConfig config;  // stops at the end-of-turn token
    config.max_tokens = argc > 3 ? std::atoi(argv[3]) : 32;
    config.sample_vocab = engine->info().sample_vocab;
    config.sampling = engine->info().default_sampling;  // the model's, as `m3 generate` uses (seed 0)

    m3::SessionCallbacks callbacks;
    callbacks.on_text = [](std::string_view text) {
      std::fwrite(text.data(), 1, text.size(), stdout);
      std::fflush(stdout);
    };
    m3::Session session(*engine, m3::SessionOptions{});
    const m3::SessionStats stats = session.generate(prompt, config, callbacks);
    std::printf("\n");
    std::fprintf(stderr, "%lld prompt tokens, %lld generated, %.1f tokens/s\n", (long long)stats.prompt_tokens,
                 (long long)stats.generated_tokens, stats.decode_tokens_per_second());
  } catch (const m3::Error& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 1;
  }
  return 0;
}
