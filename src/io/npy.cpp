#include "m3/npy.h"

#include <cstring>
#include <fstream>
#include <regex>

#include "m3/error.h"

namespace m3 {

void write_npy_f32(const std::string& path, const float* data, const std::vector<int64_t>& shape) {
  std::string dims;
  int64_t numel = 1;
  for (int64_t d : shape) {
    dims += std::to_string(d) + ", ";
    numel *= d;
  }
  if (shape.size() > 1) dims.resize(dims.size() - 2);
  std::string header = "{'descr': '<f4', 'fortran_order': False, 'shape': (" + dims + "), }";
  // magic(6) + version(2) + len(2) + header + '\n' is padded to a multiple of 64.
  const size_t total = 10 + header.size() + 1;
  header.append((64 - total % 64) % 64, ' ');
  header += '\n';
  std::ofstream f(path, std::ios::binary);
  M3_CHECK(f, path, ": cannot open for writing");
  const uint16_t len = uint16_t(header.size());
  f.write("\x93NUMPY\x01\x00", 8);
  f.write(reinterpret_cast<const char*>(&len), 2);
  f.write(header.data(), std::streamsize(header.size()));
  f.write(reinterpret_cast<const char*>(data), std::streamsize(numel * 4));
  M3_CHECK(f.good(), path, ": write failed");
}

std::vector<float> read_npy_f32(const std::string& path, std::vector<int64_t>& shape) {
  std::ifstream f(path, std::ios::binary);
  M3_CHECK(f, path, ": cannot open");
  char magic[10];
  f.read(magic, 10);
  M3_CHECK(f && std::memcmp(magic, "\x93NUMPY\x01", 7) == 0, path, ": not a .npy version 1 file");
  uint16_t len;
  std::memcpy(&len, magic + 8, 2);
  std::string header(len, '\0');
  f.read(header.data(), len);
  M3_CHECK(f && header.find("'<f4'") != std::string::npos && header.find("'fortran_order': False") != std::string::npos,
           path, ": expected little-endian float32 in C order");
  std::smatch m;
  M3_CHECK(std::regex_search(header, m, std::regex("'shape': \\(([0-9, ]*)\\)")), path, ": no shape in header");
  shape.clear();
  int64_t numel = 1;
  std::string s = m[1];
  for (size_t i = 0; i < s.size();) {
    if (std::isdigit(static_cast<unsigned char>(s[i]))) {
      size_t j = i;
      while (j < s.size() && std::isdigit(static_cast<unsigned char>(s[j]))) ++j;
      shape.push_back(std::stoll(s.substr(i, j - i)));
      numel *= shape.back();
      i = j;
    } else {
      ++i;
    }
  }
  std::vector<float> out(static_cast<size_t>(numel));
  f.read(reinterpret_cast<char*>(out.data()), std::streamsize(numel * 4));
  M3_CHECK(f, path, ": truncated data");
  return out;
}

}  // namespace m3
