#pragma once
// `m3 quantize`: a checkpoint folder to another whose linear weights are in a chosen weight format
// (docs/FORMATS.md, "m3 quantize"). Tensors are produced one at a time while the output is written
// (memory: one tensor), and the output loads with no conversion: safetensors in the formats'
// layouts, config.json with the quantization block its format's own tools write, and every other
// file of the folder (tokenizer, generation config) copied.
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "format/weight_format.h"

namespace m3 {

// A tensor-name pattern (fnmatch glob on "<module>.weight") and the format its weights take;
// format nullptr keeps the weight as stored.
struct QuantizeRule {
  std::string pattern;
  const WeightFormat* format = nullptr;
};

struct QuantizeOptions {
  const WeightFormat* format = nullptr;  // the target for the weights the policy quantizes
  // Checked first, in order; the first match decides. Then the default policy: the decoder
  // layers' linears (attention, index branch, MLPs, experts) take `format`; the embedding,
  // lm_head, MoE router gates and the vision tower stay as stored.
  std::vector<QuantizeRule> rules;
  uint64_t max_shard_bytes = 5'000'000'000;  // Hugging Face's default shard size
  int threads = 0;  // rows quantized in parallel (0: one thread per core); the bytes do not depend on it
};

struct QuantizeReport {
  struct Tally {
    uint64_t linears = 0, weights = 0, bytes = 0;
  };
  std::map<std::string, Tally> by_format;  // output linears by format name
  uint64_t requantized = 0;   // linears converted into another format
  uint64_t copied = 0;        // linears already in their output format, copied byte for byte
  uint64_t bytes_in = 0, bytes_out = 0;  // tensor bytes
};

// The format a linear of `name` (`<module>.weight`, `cols` columns) gets: nullptr = as stored.
// A format whose blocks do not divide `cols` leaves the weight as stored.
const WeightFormat* quantize_target(const QuantizeOptions& options, const std::string& name, int64_t cols);

// Writes dst (which must not be src). Throws m3::Error naming the file or tensor on any problem.
QuantizeReport quantize_checkpoint(const std::string& src, const std::string& dst, const QuantizeOptions& options);

}  // namespace m3
