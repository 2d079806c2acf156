#pragma once
// safetensors checkpoints: one file, or shards listed by model.safetensors.index.json.
// Format: u64 little-endian header length N, N bytes of JSON {name: {dtype, shape, data_offsets},
// "__metadata__": {str: str}}, then the data section; offsets are relative to the data section.
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "m3/dtype.h"
#include "base/mapped_file.h"

namespace m3 {

// "[d0, d1]" (for messages).
std::string shape_str(const std::vector<int64_t>& shape);
// Bytes a tensor of this dtype and shape occupies; nullopt when a dimension is negative or the
// product overflows 64 bits.
std::optional<uint64_t> tensor_nbytes(DType dtype, const std::vector<int64_t>& shape);

// A tensor inside a mapped file (or an owned, aligned copy when the file's bytes are misaligned).
struct TensorView {
  std::string name;
  DType dtype = DType::F32;
  std::vector<int64_t> shape;
  const uint8_t* data = nullptr;  // aligned to dtype_size(dtype)
  size_t nbytes = 0;
  std::string file;  // the file it came from, for error messages

  int64_t numel() const;
  // "name [d0, d1] BF16 (file)" for messages.
  std::string describe() const;
};

class SafetensorsFile {
 public:
  // Validates everything the format requires; throws m3::Error naming the file and the problem.
  static std::unique_ptr<SafetensorsFile> open(const std::string& path, const MapOptions& map = {});

  const std::map<std::string, TensorView>& tensors() const { return tensors_; }
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  const std::string& path() const { return file_.path(); }

 private:
  MappedFile file_;
  std::map<std::string, TensorView> tensors_;
  std::map<std::string, std::string> metadata_;
  std::vector<std::unique_ptr<uint8_t[]>> aligned_copies_;
  friend struct SafetensorsParser;
};

// All tensors of a checkpoint folder: model.safetensors, or the shards named by
// model.safetensors.index.json (every listed tensor must be in the shard the index names).
class TensorStore {
 public:
  static TensorStore open_dir(const std::string& dir, const MapOptions& map = {});
  static TensorStore open_file(const std::string& path, const MapOptions& map = {});

  const TensorView* find(const std::string& name) const;  // nullptr when absent
  // Throws "DIR: missing tensor NAME" when absent.
  const TensorView& get(const std::string& name) const;
  // Throws when absent, or when the shape differs: "NAME: shape [..] but the config implies [..]".
  const TensorView& get(const std::string& name, const std::vector<int64_t>& expected_shape) const;
  std::vector<std::string> names() const;
  size_t size() const { return index_.size(); }
  const std::string& source() const { return source_; }
  uint64_t total_bytes() const;

 private:
  std::string source_;
  std::vector<std::unique_ptr<SafetensorsFile>> files_;
  std::map<std::string, const TensorView*> index_;
};

// ---- writing ----

struct TensorData {
  std::string name;
  DType dtype = DType::F32;
  std::vector<int64_t> shape;
  std::vector<uint8_t> bytes;  // numel * dtype_size bytes, little-endian
};

// Writes one safetensors file (tensors in the given order, header padded to 8 bytes).
void write_safetensors(const std::string& path, const std::vector<TensorData>& tensors,
                       const std::map<std::string, std::string>& metadata = {});

// Writes DIR/model.safetensors when everything fits in one shard, else
// DIR/model-0000i-of-0000n.safetensors shards plus DIR/model.safetensors.index.json.
void write_checkpoint_tensors(const std::string& dir, const std::vector<TensorData>& tensors,
                              uint64_t max_shard_bytes);

// A tensor whose bytes are made when its turn comes (`m3 quantize` of a checkpoint larger than
// memory holds one tensor at a time): `produce` fills `out` with numel * dtype_size bytes.
struct TensorSource {
  std::string name;
  DType dtype = DType::F32;
  std::vector<int64_t> shape;
  std::function<void(std::vector<uint8_t>& out)> produce;
};

// Same layout as write_checkpoint_tensors, producing each tensor in order while writing it.
void write_checkpoint_streamed(const std::string& dir, const std::vector<TensorSource>& tensors,
                               uint64_t max_shard_bytes);

}  // namespace m3
