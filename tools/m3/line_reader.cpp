#include "line_reader.h"

#include <editline/readline.h>

#include <cstdlib>
#include <filesystem>
#include <iostream>

namespace m3::cli {

namespace {
constexpr int kHistoryLines = 1000;
}

std::string default_history_file() {
  std::filesystem::path dir;
  if (const char* state = std::getenv("XDG_STATE_HOME"); state != nullptr && *state != '\0') dir = state;
  else if (const char* home = std::getenv("HOME"); home != nullptr && *home != '\0') dir = std::filesystem::path(home) / ".local" / "state";
  else return "";
  dir /= "m3";
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  return ec ? "" : (dir / "chat_history").string();
}

LineReader::LineReader(std::string history_file, bool interactive)
    : history_file_(std::move(history_file)), interactive_(interactive) {
  if (!interactive_) return;
  using_history();
  stifle_history(kHistoryLines);
  if (!history_file_.empty()) read_history(history_file_.c_str());  // none yet is fine
}

LineReader::~LineReader() {
  if (interactive_ && !history_file_.empty()) {
    write_history(history_file_.c_str());
    history_truncate_file(history_file_.c_str(), kHistoryLines);
  }
}

bool LineReader::read(const std::string& prompt, std::string& line) {
  if (!interactive_) {
    if (!std::getline(std::cin, line)) return false;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    return true;
  }
  char* got = readline(prompt.c_str());
  if (got == nullptr) return false;
  line = got;
  std::free(got);
  return true;
}

bool LineReader::read_message(const std::string& prompt, const std::string& continuation, std::string& message) {
  message.clear();
  std::string line;
  if (!read(prompt, line)) return false;
  if (line == "\"\"\"") {  // a block: every line up to the closing """
    bool first = true;
    while (read(continuation, line) && line != "\"\"\"") {
      message += (first ? "" : "\n") + line;
      first = false;
    }
  } else {
    while (!line.empty() && line.back() == '\\') {
      line.pop_back();
      message += line + "\n";
      if (!read(continuation, line)) break;
    }
    message += line;
  }
  if (interactive_ && !message.empty()) add_history(message.c_str());
  return true;
}

}  // namespace m3::cli
