#pragma once
// Image and video parts of chat requests: where their bytes come from and how they enter the prompt.
//
// Sources: `data:` URLs (base64) always; local files (`file://` URLs or plain paths) only under
// the folder given with --allowed-local-media-path, after resolving symlinks and `..`, and only
// regular files (no FIFOs or devices), read within a deadline; remote
// http(s) URLs are refused (the server does not fetch). Each item is decoded, preprocessed
// (spec §5.1, §5.2) and run through the vision tower (runtime/multimodal_prompt.h encode_media);
// the runtime's Prompt places it (an image placeholder becomes start-of-image + N image tokens +
// end-of-image, a video placeholder per temporal group the timestamp text + start + M video tokens +
// end, spec §5.3), and the vision token rows take the tower's output.
#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "m3/chat/chat_template.h"
#include "m3/engine.h"
#include "m3/prompt.h"

namespace m3::server {

struct MediaOptions {
  std::string allowed_local_dir;  // empty: no local files
  size_t max_bytes = 64u << 20;   // per item
  // A local file is read in pieces; past this much time the request is refused (a stalled mount).
  std::chrono::milliseconds read_deadline{10000};
};

// The bytes behind a media URL; ApiError(400) naming `param` when it cannot be read or is not allowed.
std::string read_media_bytes(const std::string& url, const MediaOptions& options, const std::string& param);

// Standard base64 (padding optional, whitespace ignored); false on any other character.
bool decode_base64(std::string_view in, std::string& out);

// Reads and encodes the items of `media` (one per placeholder token of `ids`, in order) and expands
// the placeholders with them (runtime/prompt.h: the media rows and their prefix-cache keys). Errors
// are ApiError(400) naming messages[i].content[j].
Prompt build_media_prompt(const Engine& engine, const std::vector<int32_t>& ids, const std::vector<chat::MediaRef>& media,
                          const MediaOptions& options);

}  // namespace m3::server
