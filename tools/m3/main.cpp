// m3: the command-line front end of m3.cpp. Exit codes: docs/CLI.md (tools/m3/usage.h).
#include <cstdio>
#include <exception>
#include <string>
#include <vector>

#include "commands.h"
#include "m3/error.h"
#include "m3/version.h"
#include "usage.h"

namespace {

std::string version_text() {
  const m3::BuildInfo& b = m3::build_info();
  const m3::CpuPathInfo c = m3::cpu_path_info();
  return "m3.cpp " + b.version + " (commit " + b.commit + ")\n" +  //
         "built for " + b.arch + " with " + b.compiler + ", " + b.build_type + " [" + b.flags + "], Highway " + b.highway +
         "\n" + "CPU path " + c.active + " (best on this CPU: " + c.best + (c.forced.empty() ? "" : ", M3_CPU=" + c.forced) +
         ")";
}

std::vector<std::string> subcommand_names(const CLI::App& app) {
  std::vector<std::string> names;
  for (const CLI::App* sub : app.get_subcommands([](const CLI::App*) { return true; })) names.push_back(sub->get_name());
  return names;
}

// "m3 generate: " for an error inside a subcommand's flags, "m3: " otherwise.
std::string prefix_of(const CLI::App& app) {
  const auto parsed = app.get_subcommands();
  return parsed.empty() ? "m3: " : "m3 " + parsed.back()->get_name() + ": ";
}

}  // namespace

int main(int argc, char** argv) {
  using namespace m3::cli;
  CLI::App app{"m3.cpp: MiniMax-M3 inference engine. `m3 help COMMAND` (or `m3 COMMAND --help`) shows a command's flags.", "m3"};
  app.require_subcommand(1);
  app.set_version_flag("--version", version_text, "Version, git commit, build flags and the CPU path in use");
  register_make_checkpoint(app);
  register_inspect(app);
  register_tokenize(app);
  register_generate(app);
  register_logits(app);
  register_bench(app);
  register_preprocess(app);
  register_preprocess_video(app);
  register_make_video(app);
  register_video_tokens(app);
  register_serve(app);
  register_chat(app);
  register_quantize(app);
  register_perplexity(app);
  register_grad(app);
  register_train(app);
  register_task_examples(app);
  add_type_checks(app);

  const std::vector<std::string> names = subcommand_names(app);
  std::vector<std::string> args = expand_llama_flags(argc, argv);
  // `m3` alone and `m3 help [COMMAND]`: the list of commands, or one command's flags.
  if (args.size() == 1 || args[1] == "help") {
    if (args.size() > 2) {
      for (CLI::App* sub : app.get_subcommands([](CLI::App*) { return true; }))
        if (sub->get_name() == args[2]) {
          std::printf("%s", sub->help().c_str());
          return kExitOk;
        }
      const std::string guess = closest_name(args[2], names);
      report_line("m3: no command '" + args[2] + "'" + (guess.empty() ? "" : " (did you mean '" + guess + "'?)") +
                  "; `m3 help` lists them");
      return kExitUsage;
    }
    std::fprintf(args.size() == 1 ? stderr : stdout, "%s", app.help().c_str());
    return args.size() == 1 ? kExitUsage : kExitOk;
  }
  // A first word that is no command: say which one was probably meant.
  if (args[1].empty() || args[1][0] != '-') {
    bool known = false;
    for (const std::string& n : names) known = known || n == args[1];
    if (!known) {
      const std::string guess = closest_name(args[1], names);
      report_line("m3: no command '" + args[1] + "'" + (guess.empty() ? "" : " (did you mean '" + guess + "'?)") +
                  "; `m3 help` lists them");
      return kExitUsage;
    }
  }

  std::vector<const char*> cargv;
  for (const std::string& a : args) cargv.push_back(a.c_str());
  try {
    app.parse(int(cargv.size()), const_cast<char**>(cargv.data()));
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    const auto parsed = app.get_subcommands();
    const std::string help = parsed.empty() ? "m3 help" : "m3 " + parsed.back()->get_name() + " --help";
    report_line(prefix_of(app) + e.what() + " (see `" + help + "`)");
    return kExitUsage;
  } catch (const Interrupted&) {
    return kExitInterrupted;
  } catch (const m3::Error& e) {
    report_line(std::string("m3: error: ") + e.what());
    return kExitError;
  } catch (const std::bad_alloc&) {
    report_line("m3: error: out of memory");
    return kExitError;
  } catch (const std::exception& e) {
    report_line(std::string("m3: internal error: ") + e.what());
    return kExitInternal;
  }
  return kExitOk;
}
