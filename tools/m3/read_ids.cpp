#include "read_ids.h"

#include <cctype>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "m3/error.h"

namespace m3::cli {

std::vector<int32_t> parse_ids(const std::string& text, const std::string& what) {
  std::vector<int32_t> ids;
  size_t i = 0;
  while (i < text.size()) {
    const char c = text[i];
    if (c == ',' || std::isspace(static_cast<unsigned char>(c))) {
      ++i;
      continue;
    }
    size_t j = i;
    if (text[j] == '-') ++j;
    while (j < text.size() && std::isdigit(static_cast<unsigned char>(text[j]))) ++j;
    M3_CHECK(j > i && std::isdigit(static_cast<unsigned char>(text[j - 1])), what, ": expected token ids separated by commas, found '",
             text.substr(i, 16), "' at character ", i);
    const long long v = std::stoll(text.substr(i, j - i));
    M3_CHECK(v >= 0 && v <= INT32_MAX, what, ": token id ", v, " out of range");
    ids.push_back(int32_t(v));
    i = j;
  }
  M3_CHECK(!ids.empty(), what, ": no token ids");
  return ids;
}

std::string read_text_file(const std::string& path) {
  std::error_code ec;
  M3_CHECK(!std::filesystem::is_directory(path, ec), path, ": is a folder, not a file");
  M3_CHECK(std::filesystem::exists(path, ec), path, ": no such file");
  M3_CHECK(std::filesystem::is_regular_file(path, ec), path, ": not a regular file");
  std::ifstream f(path, std::ios::binary);
  M3_CHECK(f, path, ": cannot open");
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

std::vector<int32_t> read_ids_file(const std::string& path) { return parse_ids(read_text_file(path), path); }

}  // namespace m3::cli
