#pragma once
// --temp, --top-k, --top-p, --min-p, --repeat-penalty, --seed: the sampling flags shared by
// `m3 generate` and `m3 chat`.
#include <CLI/CLI.hpp>

#include "m3/sampling.h"

namespace m3::cli {

void add_sampling_options(CLI::App* cmd, SamplingParams& s);

}  // namespace m3::cli
