#pragma once
// Stop strings (OpenAI `stop`): generated text passes through; text that might still grow into a
// stop string is held back, and once one appears, the text before it is released and the rest of
// the output is dropped (the stop string itself is not part of the response).
#include <string>
#include <string_view>
#include <vector>

namespace m3 {

class StopStringFilter {
 public:
  explicit StopStringFilter(std::vector<std::string> stops);

  // Text that can be emitted now. After a stop string appeared, stopped() is true and further
  // pushes return nothing.
  std::string push(std::string_view text);
  std::string finish();  // the held-back tail (no stop string completed)
  bool stopped() const { return stopped_; }

 private:
  std::vector<std::string> stops_;
  std::string held_;
  bool stopped_ = false;
};

}  // namespace m3
