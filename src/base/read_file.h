#pragma once
// A whole small file (an image, a JSON document) read into memory, with the errors a user can act
// on: the path, then "no such file", "is a folder", "not a regular file" or the read error.
#include <string>

namespace m3 {

// `what` names the file's role in the messages ("image file", "tools file").
std::string read_whole_file(const std::string& path, const char* what);
// Throws the same messages without reading: for files another library opens (FFmpeg).
void check_regular_file(const std::string& path, const char* what);

}  // namespace m3
