// m3 logits: the [T, vocab] float32 logits of every position, for validation against the reference.
// --chunk sets the prefill chunk; --decode-from K prefills [0, K) and then runs one token at a time,
// so one-shot prefill, chunked prefill and decode can be compared on the same tokens.
#include <cstdio>

#include "base/error.h"
#include "commands.h"
#include "io/npy.h"
#include "read_ids.h"
#include "runtime/engine.h"
#include "runtime/generate.h"

namespace m3::cli {

void register_logits(CLI::App& app) {
  struct Args {
    std::string model, tokens, tokens_file, text, out;
    int chunk = 0, decode_from = -1, threads = 0;
  };
  auto a = std::make_shared<Args>();
  CLI::App* cmd = app.add_subcommand("logits", "Write the logits of every position to a .npy file");
  cmd->add_option("-m,--model", a->model, "Model folder")->required();
  auto* g = cmd->add_option_group("input");
  g->add_option("--tokens", a->tokens, "Token ids, comma-separated");
  g->add_option("--tokens-file", a->tokens_file, "File of token ids");
  g->add_option("--text", a->text, "Text to tokenize (special tokens stay plain text)");
  g->require_option(1);
  cmd->add_option("--out", a->out, "Output .npy file, shape [T, vocab] float32")->required();
  cmd->add_option("--chunk", a->chunk, "Prefill chunk size (default: all tokens in one pass)")->check(CLI::PositiveNumber);
  cmd->add_option("--decode-from", a->decode_from, "Prefill the first K tokens, then decode one by one")->check(CLI::NonNegativeNumber);
  cmd->add_option("-t,--threads", a->threads, "Threads (default: all cores)");
  cmd->callback([a] {
    auto engine = Engine::load(a->model, a->threads);
    std::vector<int32_t> ids;
    if (!a->tokens.empty()) ids = parse_ids(a->tokens, "--tokens");
    else if (!a->tokens_file.empty()) ids = read_ids_file(a->tokens_file);
    else ids = engine->tokenizer->encode(a->text);
    M3_CHECK(!ids.empty(), "no tokens to run");
    const int64_t T = int64_t(ids.size()), V = engine->model->vocab_size();
    const int64_t K = a->decode_from < 0 ? T : std::min<int64_t>(a->decode_from, T);
    const int chunk = a->chunk > 0 ? a->chunk : int(std::max<int64_t>(K, 1));

    KvCache cache(engine->model->cache_shape());
    std::vector<float> all(size_t(T * V)), part;
    if (K > 0) {
      prefill(*engine->model, cache, ids.data(), K, chunk, LogitsFor::All, part);
      std::copy(part.begin(), part.end(), all.begin());
    }
    for (int64_t i = K; i < T; ++i) {
      engine->model->forward(cache, ids.data() + i, 1, LogitsFor::Last, part);
      std::copy(part.begin(), part.end(), all.begin() + i * V);
    }
    write_npy_f32(a->out, all.data(), {T, V});
    std::fprintf(stderr, "wrote %s [%lld, %lld]\n", a->out.c_str(), (long long)T, (long long)V);
  });
}

}  // namespace m3::cli
