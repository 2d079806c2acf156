#pragma once
// --temp, --top-k, --top-p, --min-p, --repeat-penalty, --presence-penalty, --frequency-penalty,
// -s/--seed: the sampling flags shared by `m3 generate` and `m3 chat`. A flag not given takes the
// model's default (ModelInfo::default_sampling: its generation_config.json, else the release's
// published values), the same default `m3 serve` gives a request that leaves the field out.
#include <CLI/CLI.hpp>

#include "m3/sampling.h"

namespace m3::cli {

void add_sampling_options(CLI::App* cmd, SamplingParams& s);
// The flags given on cmd's command line over `defaults`; the seed is the flag's (default 0).
SamplingParams resolve_sampling(const CLI::App* cmd, const SamplingParams& parsed, const SamplingParams& defaults);

}  // namespace m3::cli
