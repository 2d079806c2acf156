#pragma once
// FFmpeg's error codes as text, for the messages of the video decoder and encoder.
#include <string>

extern "C" {
#include <libavutil/error.h>
}

namespace m3::vision {

inline std::string av_message(int err) {
  char buf[AV_ERROR_MAX_STRING_SIZE] = {};
  av_strerror(err, buf, sizeof(buf));
  return buf;
}

}  // namespace m3::vision
