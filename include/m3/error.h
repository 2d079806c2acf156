#pragma once
// One error type for everything a user can get wrong (bad file, bad field, bad flag).
// The message is complete on its own: it names the file or field and what was expected,
// so the CLI prints it as one line and the server returns it as a 4xx body.
#include <sstream>
#include <stdexcept>
#include <string>

namespace m3 {

struct Error : std::runtime_error {
  using std::runtime_error::runtime_error;
};

template <typename... Args>
std::string str_cat(const Args&... args) {
  std::ostringstream os;
  (os << ... << args);
  return os.str();
}

template <typename... Args>
[[noreturn]] void fail(const Args&... args) {
  throw Error(str_cat(args...));
}

// Checks a condition that depends on input data (never compiled out, unlike assert).
#define M3_CHECK(cond, ...)                \
  do {                                     \
    if (!(cond)) ::m3::fail(__VA_ARGS__);  \
  } while (0)

}  // namespace m3
