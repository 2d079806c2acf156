#include "base/read_file.h"

#include <sys/stat.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

#include "m3/error.h"

namespace m3 {

void check_regular_file(const std::string& path, const char* what) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) {
    if (errno == ENOENT) fail(path, ": no such file (cannot open ", what, ")");
    fail(path, ": cannot open ", what, ": ", std::strerror(errno));
  }
  if (S_ISDIR(st.st_mode)) fail(path, ": is a folder, not ", what);
  if (!S_ISREG(st.st_mode)) fail(path, ": not a regular file (expected ", what, ")");
}

std::string read_whole_file(const std::string& path, const char* what) {
  check_regular_file(path, what);
  std::ifstream in(path, std::ios::binary);
  if (!in) fail(path, ": cannot open ", what, ": ", std::strerror(errno));
  std::ostringstream text;
  text << in.rdbuf();
  if (in.bad()) fail(path, ": read error in ", what);
  return text.str();
}

}  // namespace m3
