#pragma once
// HTTP header values compared as RFC 9110 says: field names and the tokens of most values are
// case-insensitive, and optional whitespace (spaces, tabs) surrounds a value.
#include <cctype>
#include <string>
#include <string_view>

namespace m3::server {

inline bool iequals(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i)
    if (std::tolower(static_cast<unsigned char>(a[i])) != std::tolower(static_cast<unsigned char>(b[i]))) return false;
  return true;
}

// The value without surrounding spaces and tabs, in lower case.
inline std::string lower_trimmed(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  std::string out(s);
  for (char& c : out) c = char(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

}  // namespace m3::server
