#pragma once
// Loss curves as PNG, drawn by gnuplot (a well-kept plotting program; Debian's gnuplot-nox) from
// the run's log.jsonl: training loss and the held-out loss against the step, the indexer KL per
// layer, and the indexer recall. Returns false (and says why in `why`) when gnuplot is missing or
// fails; training goes on without the picture.
#include <string>

namespace m3::train {

bool write_loss_plot(const std::string& log_jsonl, const std::string& png, std::string& why);

}  // namespace m3::train
