#pragma once
// How `m3` talks to the person typing: exit codes (docs/CLI.md), plain messages for bad values,
// llama.cpp's multi-letter flags (-ctk, -ctv, -ngl, -np), and "did you mean" for a mistyped command.
#include <CLI/CLI.hpp>

#include <cstdint>
#include <exception>
#include <string>
#include <vector>

namespace m3::cli {

// The exit status of every subcommand (docs/CLI.md, "Exit codes").
enum ExitCode : int {
  kExitOk = 0,
  kExitError = 1,         // bad input or a failure while running (a file, a field, the model)
  kExitUsage = 2,         // bad command line: unknown command or flag, bad or missing value
  kExitInternal = 3,      // a bug: an exception that is not an m3::Error
  kExitInterrupted = 130  // stopped by SIGINT (Ctrl-C) after reporting what was done (128 + 2)
};

// Thrown by a command that stopped on SIGINT after reporting what it did: main() exits 130.
struct Interrupted : std::exception {
  const char* what() const noexcept override { return "interrupted"; }
};

// Range checks for numeric flags with plain messages ("expected a value >= 1, got '0'"). A value
// that is not a number at all passes them: the type check add_type_checks() appends names it
// ("expected a whole number, got 'gl'").
CLI::Validator NonNegative();
CLI::Validator Positive();
CLI::Validator InRange(double lo, double hi);

// Appends to every numeric option of `app` and its subcommands a check of its type: whole numbers
// for integer options, numbers for floating-point ones. Call once, after every option is added.
void add_type_checks(CLI::App& app);

// argv with llama.cpp's multi-letter single-dash flags spelt as our long ones (CLI11 would read
// "-ngl" as "-n gl"): -ctk --cache-type-k, -ctv --cache-type-v, -ngl --n-gpu-layers, -np --parallel.
std::vector<std::string> expand_llama_flags(int argc, char** argv);

// Prints one line on stderr and, when --log-file moved stderr into a file, on the terminal's
// stderr too (saved by keep_terminal_stderr()), so that the last error is never only in the log.
void report_line(const std::string& line);
void keep_terminal_stderr(int fd);

// The candidate closest to `name` by edit distance, or "" when none is close enough to suggest.
std::string closest_name(const std::string& name, const std::vector<std::string>& candidates);

}  // namespace m3::cli
