#include "io/quantize_checkpoint.h"

#include <fnmatch.h>

#include <filesystem>
#include <fstream>
#include <memory>
#include <set>
#include <nlohmann/json.hpp>

#include "m3/error.h"
#include "base/read_file.h"
#include "base/thread_pool.h"
#include "format/linear_weight.h"
#include "format/quantize.h"
#include "io/model_config.h"
#include "io/safetensors.h"
#include "io/tensor_schema.h"
#include "io/weight_binding.h"

namespace m3 {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

bool starts_with(const std::string& s, const std::string& p) { return s.compare(0, p.size(), p) == 0; }
bool ends_with(const std::string& s, const std::string& p) {
  return s.size() >= p.size() && s.compare(s.size() - p.size(), p.size(), p) == 0;
}
std::string module_of(const std::string& weight_name) {
  return ends_with(weight_name, ".weight") ? weight_name.substr(0, weight_name.size() - 7) : weight_name;
}

// A tensor copied as stored.
TensorSource copied(const TensorView& t) {
  return {t.name, t.dtype, t.shape, [&t](std::vector<uint8_t>& b) { b.assign(t.data, t.data + t.nbytes); }};
}

// The main and side tensors of `w` in `format`: the main tensor's producer quantizes the whole
// weight and keeps the side tensors' bytes for the producers that follow it.
void requantized(ThreadPool& pool, const LinearWeight& w, const std::string& name, const WeightFormat& format,
                 std::vector<TensorSource>& out) {
  auto sides = std::make_shared<std::vector<std::vector<uint8_t>>>(format.side.size());
  const int64_t rows = w.rows, cols = w.cols;
  out.push_back({name, format.element, {rows, format.stored_cols(cols)}, [w, &format, sides, &pool](std::vector<uint8_t>& b) {
                   const int64_t row_bytes = format.row_bytes(w.cols);
                   std::vector<int64_t> side_row(format.side.size());
                   for (size_t i = 0; i < format.side.size(); ++i) {
                     side_row[i] = w.cols / format.block_cols * format.side[i].per_block *
                                   int64_t(dtype_size(format.side[i].dtype));
                     (*sides)[i].assign(size_t(w.rows * side_row[i]), 0);
                   }
                   b.assign(size_t(w.rows * row_bytes), 0);
                   // Rows are independent: each thread quantizes its own (the bytes do not depend on how).
                   pool.parallel_for(w.rows, [&](int64_t r0, int64_t r1) {
                     std::vector<float> row(static_cast<size_t>(w.cols));
                     std::vector<uint8_t*> side_ptr(format.side.size());
                     for (int64_t r = r0; r < r1; ++r) {
                       w.row_to_f32(r, row.data());
                       for (size_t i = 0; i < side_ptr.size(); ++i) side_ptr[i] = (*sides)[i].data() + r * side_row[i];
                       quantize_row(format, row.data(), w.cols, b.data() + r * row_bytes, side_ptr.data());
                     }
                   }, 16);
                 }});
  const std::string module = module_of(name) + ".";
  for (size_t i = 0; i < format.side.size(); ++i) {
    const SideTensorSpec& s = format.side[i];
    out.push_back({module + s.suffix, s.dtype, {rows, cols / format.block_cols * s.per_block},
                   [sides, i](std::vector<uint8_t>& b) { b = std::move((*sides)[i]); }});
  }
}

// config.json of the output: the source's, with the quantization blocks that describe the output's
// weights (mlx-lm's "quantization" for affine weights, the release's "quantization_config" for
// MXFP8) in place of the source's.
std::string output_config(const std::string& src_config, const std::map<std::string, const WeightFormat*>& formats) {
  json cfg;
  try {
    cfg = json::parse(read_whole_file(src_config, "config file"));
  } catch (const json::exception& e) {
    fail(src_config, ": not valid JSON: ", e.what());
  }
  cfg.erase("quantization");
  cfg.erase("quantization_config");
  std::map<std::pair<int, int>, int> affine_count;
  bool any_mxfp8 = false;
  for (const auto& [module, f] : formats) {
    if (const auto a = affine_params(*f)) ++affine_count[{a->bits, a->group}];
    any_mxfp8 |= f == &mxfp8_format();
  }
  if (!affine_count.empty()) {
    // The most common bits/group is the default; the others are per-module entries.
    std::pair<int, int> common = affine_count.begin()->first;
    for (const auto& [k, n] : affine_count)
      if (n > affine_count[common]) common = k;
    json block = {{"group_size", common.second}, {"bits", common.first}, {"mode", "affine"}};
    for (const auto& [module, f] : formats)
      if (const auto a = affine_params(*f); a && std::pair{a->bits, a->group} != common)
        block[module] = {{"group_size", a->group}, {"bits", a->bits}};
    cfg["quantization"] = block;
    if (!any_mxfp8) cfg["quantization_config"] = block;  // mlx-lm writes both
  }
  if (any_mxfp8) {
    json ignored = json::array();
    for (const auto& [module, f] : formats)
      if (f != &mxfp8_format()) ignored.push_back(module);
    cfg["quantization_config"] = {{"quant_method", "mxfp8"},       {"activation_scheme", "dynamic"},
                                  {"weight_block_size", {1, 32}}, {"scale_fmt", "ue8m0"},
                                  {"ignored_layers", ignored}};
  }
  return cfg.dump(2) + "\n";
}

}  // namespace

const WeightFormat* quantize_target(const QuantizeOptions& options, const std::string& name, int64_t cols) {
  const WeightFormat* f = nullptr;
  bool decided = false;
  for (const QuantizeRule& r : options.rules)
    if (fnmatch(r.pattern.c_str(), name.c_str(), 0) == 0) {
      f = r.format;
      decided = true;
      break;
    }
  if (!decided) {
    const bool layer_linear = starts_with(name, "language_model.model.layers.") && ends_with(name, ".weight") &&
                              !ends_with(name, ".block_sparse_moe.gate.weight");
    f = layer_linear ? options.format : nullptr;
  }
  if (f != nullptr && (cols % f->block_cols != 0 || cols % f->weights_per_element != 0)) return nullptr;
  return f;
}

QuantizeReport quantize_checkpoint(const std::string& src, const std::string& dst, const QuantizeOptions& options) {
  M3_CHECK(options.format != nullptr && can_quantize_to(*options.format), "quantize: no target format");
  for (const QuantizeRule& r : options.rules)
    M3_CHECK(r.format == nullptr || can_quantize_to(*r.format), "quantize: cannot write ", r.format->name);
  std::error_code ec;
  M3_CHECK(!fs::exists(dst) || !fs::equivalent(src, dst, ec), dst, ": is the source folder; write to another");
  const std::string config_path = (fs::path(src) / "config.json").string();
  const ModelConfig cfg = ModelConfig::from_file(config_path);
  const TensorStore store = TensorStore::open_dir(src);
  const QuantizationConfig* q = cfg.quantization ? &*cfg.quantization : nullptr;

  std::vector<TensorSpec> schema = text_tensor_schema(cfg.text);
  if (cfg.vision) {
    const std::vector<TensorSpec> v = vision_tensor_schema(cfg);
    schema.insert(schema.end(), v.begin(), v.end());
  }
  ThreadPool pool(options.threads);
  QuantizeReport report;
  std::vector<TensorSource> out;
  std::set<std::string> done;  // tensors already emitted (a linear's side tensors with it)
  std::map<std::string, const WeightFormat*> linear_formats;  // module -> output format
  for (const TensorSpec& spec : schema) {
    if (spec.storage == TensorStorage::Vector || spec.shape.size() != 2 || store.find(spec.name) == nullptr) continue;
    const LinearWeight w = bind_linear(store, spec, q);
    const WeightFormat* target = quantize_target(options, spec.name, w.cols);
    if (target == nullptr) target = w.format;
    const std::string module = module_of(spec.name);
    done.insert(spec.name);
    for (const SideTensorSpec& s : w.format->side) done.insert(module + "." + s.suffix);
    if (target == w.format) {  // on the format's grid already: copy, re-quantizing could only lose
      out.push_back(copied(store.get(spec.name)));
      for (const SideTensorSpec& s : w.format->side) out.push_back(copied(store.get(module + "." + s.suffix)));
      ++report.copied;
    } else {
      requantized(pool, w, spec.name, *target, out);
      ++report.requantized;
    }
    linear_formats[module] = target;
    QuantizeReport::Tally& t = report.by_format[target->name];
    ++t.linears;
    t.weights += uint64_t(w.rows * w.cols);
    t.bytes += uint64_t(w.rows * target->row_bytes(w.cols));
    for (const SideTensorSpec& s : target->side)
      t.bytes += uint64_t(w.rows * (w.cols / target->block_cols) * s.per_block) * dtype_size(s.dtype);
  }
  for (const std::string& name : store.names())  // norms, biases, anything the schema does not name
    if (!done.count(name)) out.push_back(copied(store.get(name)));
  for (const std::string& name : store.names()) report.bytes_in += store.get(name).nbytes;
  for (const TensorSource& t : out) report.bytes_out += *tensor_nbytes(t.dtype, t.shape);

  const std::string config_text = output_config(config_path, linear_formats);
  fs::create_directories(dst, ec);
  M3_CHECK(!ec, dst, ": cannot create the folder: ", ec.message());
  write_checkpoint_streamed(dst, out, options.max_shard_bytes);
  {
    std::ofstream os(fs::path(dst) / "config.json", std::ios::trunc);
    os << config_text;
    M3_CHECK(bool(os), dst, "/config.json: write failed");
  }
  for (const fs::directory_entry& e : fs::directory_iterator(src)) {
    const std::string file = e.path().filename().string();
    if (!e.is_regular_file() || file == "config.json" || ends_with(file, ".safetensors") ||
        file == "model.safetensors.index.json")
      continue;
    fs::copy_file(e.path(), fs::path(dst) / file, fs::copy_options::overwrite_existing, ec);
    M3_CHECK(!ec, dst, "/", file, ": cannot copy from ", src, ": ", ec.message());
  }
  return report;
}

}  // namespace m3
