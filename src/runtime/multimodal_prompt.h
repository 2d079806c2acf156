#pragma once
// Text plus images and videos as model input (spec §5), the engine side of m3/media.h and
// m3/prompt.h: each item is decoded, preprocessed and run through a vision tower; Prompt places
// its rows.
#include <string>

#include "m3/media.h"
#include "m3/prompt.h"
#include "runtime/engine.h"
#include "vision/media_prompt.h"
#include "vision/vision_tower.h"

namespace m3 {

// One item through `tower` (the server keeps one tower for all requests).
EncodedMedia encode_media(const vision::VisionTower& tower, const MediaInput& in, const MultimodalOptions& options = {});

}  // namespace m3
