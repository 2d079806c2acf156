#include "usage.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstdio>
#include <cstring>
#include <map>

#include <unistd.h>

namespace m3::cli {

namespace {

// The value as a finite number, or false when the whole string is not one.
bool parse_number(const std::string& s, double& out) {
  if (s.empty()) return false;
  char* end = nullptr;
  errno = 0;
  out = std::strtod(s.c_str(), &end);
  return end == s.c_str() + s.size() && errno != ERANGE && std::isfinite(out);
}

bool is_whole_number(const std::string& s) {
  size_t i = (s.size() > 1 && (s[0] == '-' || s[0] == '+')) ? 1 : 0;
  if (i == s.size()) return false;
  for (; i < s.size(); ++i)
    if (s[i] < '0' || s[i] > '9') return false;
  return s.size() <= 19;  // fits int64 whatever the digits (the option's own type narrows further)
}

std::string shown(double v) {
  if (v == std::floor(v) && std::fabs(v) < 1e15) return std::to_string(int64_t(v));
  return CLI::detail::to_string(v);
}

CLI::Validator range_check(double lo, double hi, bool lo_open, const std::string& what, const std::string& label) {
  return CLI::Validator(
      [=](std::string& s) -> std::string {
        double v = 0;
        if (!parse_number(s, v)) return "";  // not a number: the type check says so
        if (v < lo || (lo_open && v == lo) || v > hi) return "expected " + what + ", got '" + s + "'";
        return "";
      },
      label);
}

}  // namespace

// The labels are what --help shows after the type (CLI11's own style: INT:POSITIVE).
CLI::Validator NonNegative() { return range_check(0, HUGE_VAL, false, "a value >= 0", "NONNEGATIVE"); }
CLI::Validator Positive() { return range_check(0, HUGE_VAL, true, "a value > 0", "POSITIVE"); }
CLI::Validator InRange(double lo, double hi) {
  return range_check(lo, hi, false, "a value from " + shown(lo) + " to " + shown(hi), "[" + shown(lo) + " - " + shown(hi) + "]");
}

void add_type_checks(CLI::App& app) {
  for (CLI::Option* opt : app.get_options()) {
    if (opt->get_type_size() == 0) continue;  // a flag
    std::string type = opt->get_type_name();  // "INT", or "INT:POSITIVE" with a validator's label
    type = type.substr(0, type.find(':'));
    const bool whole = type == "INT" || type == "UINT";
    if (!whole && type != "FLOAT") continue;
    const bool unsigned_type = type == "UINT";
    opt->check(CLI::Validator(
        [whole, unsigned_type](std::string& s) -> std::string {
          double v = 0;
          if (whole ? !is_whole_number(s) || (unsigned_type && s[0] == '-') : !parse_number(s, v))
            return std::string(whole ? "expected a whole number" : "expected a number") + ", got '" + s + "'";
          return "";
        },
        ""));
  }
  for (CLI::App* sub : app.get_subcommands([](CLI::App*) { return true; })) add_type_checks(*sub);
}

std::vector<std::string> expand_llama_flags(int argc, char** argv) {
  static const std::map<std::string, std::string> kLong = {
      {"-ctk", "--cache-type-k"}, {"-ctv", "--cache-type-v"}, {"-ngl", "--n-gpu-layers"}, {"-np", "--parallel"}};
  std::vector<std::string> out;
  for (int i = 0; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--") {  // everything after is a value
      out.insert(out.end(), argv + i, argv + argc);
      break;
    }
    auto it = kLong.find(a);
    out.push_back(it != kLong.end() ? it->second : a);
  }
  return out;
}

namespace {
int g_terminal_stderr = -1;
}

void keep_terminal_stderr(int fd) { g_terminal_stderr = fd; }

void report_line(const std::string& line) {
  const std::string text = line + "\n";
  std::fflush(stderr);
  if (::write(STDERR_FILENO, text.data(), text.size()) < 0) { /* nowhere left to report */ }
  if (g_terminal_stderr >= 0 && ::write(g_terminal_stderr, text.data(), text.size()) < 0) { /* likewise */ }
}

std::string closest_name(const std::string& name, const std::vector<std::string>& candidates) {
  auto distance = [](const std::string& a, const std::string& b) {  // Levenshtein, two rows
    std::vector<size_t> prev(b.size() + 1), cur(b.size() + 1);
    for (size_t j = 0; j <= b.size(); ++j) prev[j] = j;
    for (size_t i = 1; i <= a.size(); ++i) {
      cur[0] = i;
      for (size_t j = 1; j <= b.size(); ++j)
        cur[j] = std::min({prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1)});
      std::swap(prev, cur);
    }
    return prev[b.size()];
  };
  std::vector<std::string> prefixed;  // "gen" for "generate"
  for (const std::string& c : candidates)
    if (name.size() >= 2 && c.compare(0, name.size(), name) == 0) prefixed.push_back(c);
  if (prefixed.size() == 1) return prefixed[0];
  std::string best;
  size_t best_d = SIZE_MAX;
  for (const std::string& c : candidates) {
    const size_t d = distance(name, c);
    if (d < best_d) best_d = d, best = c;
  }
  // Close enough to be a typo: at most a third of the letters wrong.
  return best_d <= std::max<size_t>(1, name.size() / 3) ? best : "";
}

}  // namespace m3::cli
