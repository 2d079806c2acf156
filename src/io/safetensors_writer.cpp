// Writing safetensors: one file, or a sharded checkpoint folder with model.safetensors.index.json.
// Files are written to NAME.tmp and renamed, so a reader never sees a half-written file under the
// real name (atomic against concurrent readers and against a crash mid-write; not fsync'ed).
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <set>

#include <nlohmann/json.hpp>

#include "m3/error.h"
#include "io/safetensors.h"

namespace m3 {

namespace fs = std::filesystem;

namespace {

// Writes `path` through `fill`, via path.tmp and a rename; removes the temporary on any failure.
void write_file_atomically(const std::string& path, const std::function<void(std::ostream&)>& fill) {
  const std::string tmp = path + ".tmp";
  try {
    std::ofstream os(tmp, std::ios::binary | std::ios::trunc);
    if (!os) fail(tmp, ": cannot create file");
    fill(os);
    os.close();
    if (!os) fail(tmp, ": write failed (disk full?)");
    std::error_code ec;
    fs::rename(tmp, path, ec);
    if (ec) fail(path, ": cannot rename ", tmp, " into place: ", ec.message());
  } catch (...) {
    std::error_code ignored;
    fs::remove(tmp, ignored);
    throw;
  }
}

// The bytes a tensor of this dtype and shape holds; fails for an invalid shape.
uint64_t nbytes_of(const std::string& path, const TensorSource& t) {
  const std::optional<uint64_t> need = tensor_nbytes(t.dtype, t.shape);
  if (!need) fail(path, ": tensor \"", t.name, "\" has an invalid shape ", shape_str(t.shape));
  return *need;
}

void put_u64_le(std::ostream& os, uint64_t v) {
  char b[8];
  for (int i = 0; i < 8; ++i) b[i] = char((v >> (8 * i)) & 0xff);
  os.write(b, 8);
}

// The header JSON for `tensors` laid out back to back in the given order, padded with spaces so
// that the data section (8 + header length) starts at a multiple of 8.
std::string build_header(const std::string& path, const std::vector<const TensorSource*>& tensors,
                         const std::map<std::string, std::string>& metadata) {
  nlohmann::ordered_json header = nlohmann::ordered_json::object();  // keeps the given order
  if (!metadata.empty()) header["__metadata__"] = metadata;
  std::set<std::string> seen;
  uint64_t offset = 0;
  for (const TensorSource* t : tensors) {
    if (t->name == "__metadata__") fail(path, ": a tensor cannot be named \"__metadata__\"");
    if (!seen.insert(t->name).second) fail(path, ": duplicate tensor name \"", t->name, "\"");
    const uint64_t need = nbytes_of(path, *t);
    header[t->name] = {{"dtype", dtype_name(t->dtype)},
                       {"shape", t->shape},
                       {"data_offsets", {offset, offset + need}}};
    offset += need;
  }
  std::string text;
  try {
    text = header.dump();
  } catch (const nlohmann::json::exception& e) {  // e.g. a name that is not valid UTF-8
    fail(path, ": cannot encode the header: ", e.what());
  }
  text.append((8 - (8 + text.size()) % 8) % 8, ' ');
  return text;
}

void write_safetensors_refs(const std::string& path, const std::vector<const TensorSource*>& tensors,
                            const std::map<std::string, std::string>& metadata) {
  const std::string header = build_header(path, tensors, metadata);
  write_file_atomically(path, [&](std::ostream& os) {
    put_u64_le(os, header.size());
    os.write(header.data(), std::streamsize(header.size()));
    std::vector<uint8_t> bytes;
    for (const TensorSource* t : tensors) {
      bytes.clear();
      t->produce(bytes);
      const uint64_t need = nbytes_of(path, *t);
      if (bytes.size() != need)
        fail(path, ": tensor \"", t->name, "\" has ", bytes.size(), " bytes but shape ", shape_str(t->shape), " of ",
             dtype_name(t->dtype), " needs ", need);
      os.write(reinterpret_cast<const char*>(bytes.data()), std::streamsize(bytes.size()));
    }
  });
}

// Greedy split in the given order: a shard takes tensors while it stays within max_shard_bytes;
// a tensor larger than that gets a shard of its own.
std::vector<std::vector<const TensorSource*>> plan_shards(const std::string& dir, const std::vector<TensorSource>& tensors,
                                                          uint64_t max_shard_bytes) {
  std::vector<std::vector<const TensorSource*>> shards;
  uint64_t used = 0;
  for (const TensorSource& t : tensors) {
    const uint64_t n = nbytes_of(dir, t);
    if (shards.empty() || (!shards.back().empty() && used + n > max_shard_bytes)) {
      shards.emplace_back();
      used = 0;
    }
    shards.back().push_back(&t);
    used += n;
  }
  if (shards.empty()) shards.emplace_back();  // a checkpoint with no tensors is still one file
  return shards;
}

std::string shard_file_name(size_t i, size_t n) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "model-%05zu-of-%05zu.safetensors", i + 1, n);
  return buf;
}

// In-memory tensors as sources that copy their bytes.
std::vector<TensorSource> sources_of(const std::vector<TensorData>& tensors) {
  std::vector<TensorSource> out;
  out.reserve(tensors.size());
  for (const TensorData& t : tensors)
    out.push_back({t.name, t.dtype, t.shape, [&t](std::vector<uint8_t>& b) { b = t.bytes; }});
  return out;
}

}  // namespace

void write_safetensors(const std::string& path, const std::vector<TensorData>& tensors,
                       const std::map<std::string, std::string>& metadata) {
  const std::vector<TensorSource> sources = sources_of(tensors);
  std::vector<const TensorSource*> refs;
  refs.reserve(sources.size());
  for (const TensorSource& t : sources) refs.push_back(&t);
  write_safetensors_refs(path, refs, metadata);
}

void write_checkpoint_tensors(const std::string& dir, const std::vector<TensorData>& tensors,
                              uint64_t max_shard_bytes) {
  write_checkpoint_streamed(dir, sources_of(tensors), max_shard_bytes);
}

void write_checkpoint_streamed(const std::string& dir, const std::vector<TensorSource>& tensors,
                               uint64_t max_shard_bytes) {
  if (max_shard_bytes == 0) fail(dir, ": max_shard_bytes must be positive");
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) fail(dir, ": cannot create checkpoint folder: ", ec.message());

  // "format": "pt" is what Hugging Face tooling expects to find in checkpoint files.
  const std::map<std::string, std::string> metadata = {{"format", "pt"}};
  const fs::path single = fs::path(dir) / "model.safetensors";
  const fs::path index = fs::path(dir) / "model.safetensors.index.json";
  const auto shards = plan_shards(dir, tensors, max_shard_bytes);

  if (shards.size() == 1) {
    write_safetensors_refs(single.string(), shards[0], metadata);
    fs::remove(index, ec);  // a stale index from an earlier sharded write would mislead readers
    return;
  }

  nlohmann::ordered_json weight_map = nlohmann::ordered_json::object();
  uint64_t total = 0;
  for (size_t i = 0; i < shards.size(); ++i) {
    const std::string name = shard_file_name(i, shards.size());
    write_safetensors_refs((fs::path(dir) / name).string(), shards[i], metadata);
    for (const TensorSource* t : shards[i]) {
      weight_map[t->name] = name;
      total += nbytes_of(dir, *t);
    }
  }
  nlohmann::ordered_json doc = {{"metadata", {{"total_size", total}}}, {"weight_map", weight_map}};
  const std::string text = doc.dump(2) + "\n";
  write_file_atomically(index.string(), [&](std::ostream& os) { os.write(text.data(), std::streamsize(text.size())); });
  fs::remove(single, ec);  // readers prefer model.safetensors: a stale one would hide the shards
}

}  // namespace m3
