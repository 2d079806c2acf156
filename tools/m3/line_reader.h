#pragma once
// The input line of `m3 chat` in a terminal: line editing (arrows, Home/End, word moves), a
// history kept across runs and searched with Ctrl-R, through libedit (BSD-licensed, in Debian,
// readline's interface; docs/CHAT.md says why this library). Pipes read plain lines instead.
#include <string>

namespace m3::cli {

class LineReader {
 public:
  // history_file: where the history is loaded from and appended to ("" = none); interactive:
  // stdin is a terminal (libedit), otherwise lines are read as they come.
  LineReader(std::string history_file, bool interactive);
  ~LineReader();
  LineReader(const LineReader&) = delete;
  LineReader& operator=(const LineReader&) = delete;

  // One line without its newline; false at end of input (Ctrl-D, EOF) or when Ctrl-C interrupted
  // the read.
  bool read(const std::string& prompt, std::string& line);
  // A message as the user meant it: a line ending in `\` continues on the next line, and a line
  // of `"""` opens a block that runs to the next `"""`. The whole message goes into the history.
  bool read_message(const std::string& prompt, const std::string& continuation, std::string& message);

 private:
  std::string history_file_;
  bool interactive_;
};

// ${XDG_STATE_HOME:-$HOME/.local/state}/m3/chat_history, its folder created; "" without a home.
std::string default_history_file();

}  // namespace m3::cli
