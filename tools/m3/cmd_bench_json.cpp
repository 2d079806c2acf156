// m3 bench json: the cost of response_format json_object per answer token. Each step masks the
// whole vocabulary against the JSON text so far (chat/json_prefix.h, the server's code), then
// feeds the next token of a sample answer; the sample's own tokens must always stay allowed.
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "m3/error.h"
#include "bench_report.h"
#include "bench_util.h"
#include "m3/chat/json_prefix.h"
#include "commands.h"
#include "usage.h"
#include "m3/tokenizer.h"
#include "tokenizer_path.h"

namespace m3::cli {

void register_bench_json(CLI::App* bench) {
  struct Args {
    std::string model;
    int reps = 3;
    std::string output = "md";
  };
  auto a = std::make_shared<Args>();
  CLI::App* cmd = bench->add_subcommand("json", "response_format json_object: vocabulary mask time per answer token");
  cmd->add_option("-m,--model", a->model, "Model folder or tokenizer.json")->required();
  cmd->add_option("-r,--reps", a->reps, "Repetitions (median)")->capture_default_str()->check(Positive());
  add_report_option(cmd, a->output);
  cmd->callback([a] {
    const auto tok = Tokenizer::from_file(tokenizer_path(a->model));
    const int V = tok->vocab_size();
    std::vector<std::string> text(static_cast<size_t>(V));
    for (int t = 0; t < V; ++t)
      if (!tok->is_special(t) && tok->has_token(t)) text[size_t(t)] = tok->token_bytes(t);
    // An answer of the kind agents ask for: nesting, numbers, escapes, non-ASCII text.
    const std::string sample =
        "{\"city\": \"Zürich\", \"forecast\": [{\"day\": 1, \"high_c\": 21.5, \"low_c\": -3e0, \"rain\": false},"
        " {\"day\": 2, \"high_c\": 19, \"low_c\": 4.25, \"rain\": true}], \"note\": \"\\\"approx.\\\"\\n\","
        " \"sources\": null}";
    const std::vector<int32_t> ids = tok->encode(sample);
    std::vector<float> logits(static_cast<size_t>(V));
    int64_t allowed = 0;
    const Timing t = time_runs(a->reps, 0, [&] {
      chat::JsonPrefix json;
      allowed = 0;
      for (int32_t id : ids) {
        std::fill(logits.begin(), logits.end(), 0.0f);
        chat::mask_json_tokens(json, text, logits.data(), -1);
        M3_CHECK(logits[size_t(id)] == 0.0f, "bench json: the sample's token ", id, " was masked");
        for (float l : logits) allowed += l == 0.0f;
        M3_CHECK(json.feed(text[size_t(id)]), "bench json: token ", id, " does not continue the sample");
      }
      M3_CHECK(json.complete(), "bench json: the sample is not a complete object");
    });
    const double steps = double(ids.size());
    // No kernels run here (the mask is string matching): the report's facts are the ones every bench prints.
    BenchReport report(report_format_of(a->output));
    report.machine_facts(1, {});
    report.table("response_format json_object: the vocabulary mask per answer token",
                 {{"vocabulary", ""}, {"answer_tokens", "answer tokens"}, {"mask_ms_per_token", "mask ms per token"},
                  {"allowed_tokens_mean", "allowed tokens per step (mean)"}, {"allowed_share", "allowed %"}});
    report.row({V, (long long)ids.size(), Cell(1e3 * t.median / steps, "%.3f"), Cell(double(allowed) / steps, "%.0f"),
                Cell(100.0 * double(allowed) / steps / V, "%.1f%%")});
    report.finish();
  });
}

}  // namespace m3::cli
