#pragma once
// The sampling defaults of a checkpoint folder: its generation_config.json (Hugging Face's file,
// as vLLM reads it) over the release's published values.
#include <string>

#include "m3/sampling.h"

namespace m3 {

// dir/generation_config.json's temperature, top_p and top_k over published_default_sampling();
// do_sample false means greedy. No file: the published values. Throws m3::Error naming the file
// and field when the file is not JSON or a field has the wrong type or range.
SamplingParams read_generation_defaults(const std::string& dir);

}  // namespace m3
