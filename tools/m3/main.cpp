// m3: the command-line front end of m3.cpp.
#include <cstdio>
#include <exception>

#include "m3/error.h"
#include "commands.h"

int main(int argc, char** argv) {
  CLI::App app{"m3.cpp: MiniMax-M3 inference engine"};
  app.require_subcommand(1);
  m3::cli::register_make_checkpoint(app);
  m3::cli::register_inspect(app);
  m3::cli::register_tokenize(app);
  m3::cli::register_generate(app);
  m3::cli::register_logits(app);
  m3::cli::register_bench(app);
  m3::cli::register_preprocess(app);
  m3::cli::register_preprocess_video(app);
  m3::cli::register_make_video(app);
  m3::cli::register_video_tokens(app);
  m3::cli::register_serve(app);
  m3::cli::register_chat(app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  } catch (const m3::Error& e) {
    std::fprintf(stderr, "m3: error: %s\n", e.what());
    return 1;
  } catch (const std::bad_alloc&) {
    std::fprintf(stderr, "m3: error: out of memory\n");
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "m3: internal error: %s\n", e.what());
    return 2;
  }
  return 0;
}
