#pragma once
// Token id lists on the command line: "1,2,3" or a file with ids separated by commas/whitespace.
#include <cstdint>
#include <string>
#include <vector>

namespace m3::cli {

std::vector<int32_t> parse_ids(const std::string& text, const std::string& what);
std::vector<int32_t> read_ids_file(const std::string& path);
std::string read_text_file(const std::string& path);

}  // namespace m3::cli
