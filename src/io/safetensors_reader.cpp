// Reading safetensors: one memory-mapped file (SafetensorsFile) and a checkpoint folder of one
// file or index-listed shards (TensorStore). Every rule of the format is checked up front, so
// code that later reads a TensorView can trust its dtype, shape and byte range.
#include <algorithm>
#include <cstring>
#include <filesystem>
#include <limits>
#include <set>
#include <string_view>
#include <tuple>

#include <nlohmann/json.hpp>

#include "m3/error.h"
#include "io/safetensors.h"

namespace m3 {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

// A header larger than this is a lying length field, not a real checkpoint (HF uses the same bound).
constexpr uint64_t kMaxHeaderBytes = 100'000'000;
// The header is at most three containers deep (file -> entry -> shape); a much deeper document
// is garbage, and refusing it early keeps recursion in the JSON library bounded.
constexpr int kMaxJsonDepth = 32;

constexpr const char* kSingleFile = "model.safetensors";
constexpr const char* kIndexFile = "model.safetensors.index.json";

std::string supported_dtypes() {
  std::string s;
  for (DType t : kAllDTypes) {
    if (!s.empty()) s += ", ";
    s += dtype_name(t);
  }
  return s;
}

// Parses JSON text, rejecting what nlohmann accepts silently but the format forbids: duplicate
// keys in one object (nlohmann keeps the last one) and absurd nesting. `where` starts each
// message; `what` names the document ("header", "index"); a duplicate key at the top level is
// called a `top_key_noun` ("tensor name" for a safetensors header).
json parse_json_strict(std::string_view text, const std::string& where, const char* what,
                       const char* top_key_noun) {
  struct Scope {
    std::set<std::string> keys;
    std::string owner;  // key under which this object sits ("" at the top)
  };
  std::vector<Scope> scopes;
  std::string last_key;
  auto check = [&](int depth, json::parse_event_t event, json& parsed) -> bool {
    switch (event) {
      case json::parse_event_t::object_start:
      case json::parse_event_t::array_start:
        if (depth >= kMaxJsonDepth) fail(where, ": ", what, " is nested deeper than ", kMaxJsonDepth, " levels");
        if (event == json::parse_event_t::object_start) scopes.push_back({{}, scopes.empty() ? "" : last_key});
        break;
      case json::parse_event_t::object_end:
        scopes.pop_back();
        break;
      case json::parse_event_t::key: {
        std::string key = parsed.get<std::string>();
        Scope& scope = scopes.back();
        if (!scope.keys.insert(key).second) {
          if (scopes.size() == 1) fail(where, ": duplicate ", top_key_noun, " \"", key, "\" in ", what);
          fail(where, ": duplicate key \"", key, "\" inside \"", scope.owner, "\" in ", what);
        }
        last_key = std::move(key);
        break;
      }
      default:
        break;
    }
    return true;
  };
  try {
    return json::parse(text.data(), text.data() + text.size(), check);
  } catch (const json::exception& e) {
    fail(where, ": ", what, " is not valid JSON: ", e.what());
  }
}

// A JSON integer as int64 / uint64; nullopt for anything else (floats, strings, out of range).
std::optional<int64_t> as_int64(const json& v) {
  if (v.is_number_unsigned()) {
    uint64_t u = v.get<uint64_t>();
    if (u > uint64_t(std::numeric_limits<int64_t>::max())) return std::nullopt;
    return int64_t(u);
  }
  if (v.is_number_integer()) return v.get<int64_t>();
  return std::nullopt;
}

std::optional<uint64_t> as_uint64(const json& v) {
  if (v.is_number_unsigned()) return v.get<uint64_t>();
  return std::nullopt;  // negative integers parse as number_integer
}

uint64_t read_u64_le(const uint8_t* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

// One tensor's byte range in the data section, for the layout check.
struct Range {
  uint64_t begin, end;
  const std::string* name;
};

}  // namespace

std::string shape_str(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i) s += ", ";
    s += std::to_string(shape[i]);
  }
  return s + "]";
}

std::optional<uint64_t> tensor_nbytes(DType dtype, const std::vector<int64_t>& shape) {
  uint64_t n = dtype_size(dtype);
  for (int64_t d : shape) {
    if (d < 0 || __builtin_mul_overflow(n, uint64_t(d), &n)) return std::nullopt;
  }
  return n;
}

int64_t TensorView::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;  // validated when the file was opened: no overflow
  return n;
}

std::string TensorView::describe() const {
  return str_cat(name, " ", shape_str(shape), " ", dtype_name(dtype), " (", file, ")");
}

// ---- SafetensorsFile ----

// Validates one mapped file and fills a SafetensorsFile. A friend of SafetensorsFile.
struct SafetensorsParser {
  SafetensorsFile& out;
  const std::string& path;
  const uint8_t* data_section = nullptr;  // first byte after the header
  uint64_t data_size = 0;

  void run() {
    const uint64_t header_len = read_header_length();
    const uint8_t* header = out.file_.data() + 8;
    data_section = header + header_len;
    data_size = out.file_.size() - 8 - header_len;

    json doc = parse_json_strict(std::string_view(reinterpret_cast<const char*>(header), header_len), path,
                                 "header", "tensor name");
    if (!doc.is_object()) fail(path, ": header is not a JSON object");

    std::vector<Range> ranges;
    for (auto& [name, entry] : doc.items()) {
      if (name == "__metadata__") {
        parse_metadata(entry);
        continue;
      }
      auto [begin, end] = parse_entry(name, entry);
      ranges.push_back({begin, end, &out.tensors_.at(name).name});
    }
    check_layout(ranges);
    for (const Range& r : ranges) place_data(out.tensors_.at(*r.name), r.begin);
  }

  // The u64 little-endian length that starts the file, checked against the file size.
  uint64_t read_header_length() {
    const size_t size = out.file_.size();
    if (size < 8) fail(path, ": file is ", size, " bytes, shorter than the 8-byte header length field");
    const uint64_t n = read_u64_le(out.file_.data());
    if (n > kMaxHeaderBytes) fail(path, ": header length ", n, " exceeds the limit of ", kMaxHeaderBytes, " bytes");
    if (n > size - 8) fail(path, ": header length ", n, " runs past the end of the file (", size, " bytes)");
    return n;
  }

  void parse_metadata(const json& meta) {
    if (!meta.is_object()) fail(path, ": __metadata__ must be an object of string to string");
    for (auto& [key, value] : meta.items()) {
      if (!value.is_string()) fail(path, ": __metadata__ value for \"", key, "\" must be a string");
      out.metadata_[key] = value.get<std::string>();
    }
  }

  // Checks one header entry and records it (without its data pointer); returns its byte range.
  std::pair<uint64_t, uint64_t> parse_entry(const std::string& name, const json& entry) {
    const std::string where = str_cat(path, ": tensor \"", name, "\"");
    if (!entry.is_object()) fail(where, ": entry is not an object");
    const json& dtype_j = field(where, entry, "dtype");
    const json& shape_j = field(where, entry, "shape");
    const json& offsets_j = field(where, entry, "data_offsets");

    TensorView t;
    t.name = name;
    t.file = path;
    t.dtype = parse_dtype_field(where, dtype_j);
    t.shape = parse_shape_field(where, shape_j);
    const std::optional<uint64_t> need = tensor_nbytes(t.dtype, t.shape);
    if (!need) fail(where, ": field \"shape\" ", shape_str(t.shape), " has more elements than fit in 64 bits (overflow)");

    if (!offsets_j.is_array() || offsets_j.size() != 2 || !as_uint64(offsets_j[0]) || !as_uint64(offsets_j[1]))
      fail(where, ": field \"data_offsets\" must be [begin, end] with non-negative integers, got ", offsets_j.dump());
    const uint64_t begin = *as_uint64(offsets_j[0]), end = *as_uint64(offsets_j[1]);
    if (begin > end) fail(where, ": field \"data_offsets\" [", begin, ", ", end, "] has begin after end");
    if (end > data_size)
      fail(where, ": field \"data_offsets\" end ", end, " is past the end of the data section (", data_size, " bytes)");
    if (end - begin != *need)
      fail(where, ": field \"data_offsets\" spans ", end - begin, " bytes but shape ", shape_str(t.shape), " of ",
           dtype_name(t.dtype), " needs ", *need, " bytes");
    t.nbytes = size_t(*need);
    out.tensors_.emplace(name, std::move(t));
    return {begin, end};
  }

  static const json& field(const std::string& where, const json& entry, const char* key) {
    auto it = entry.find(key);
    if (it == entry.end()) fail(where, ": missing field \"", key, "\"");
    return *it;
  }

  static DType parse_dtype_field(const std::string& where, const json& v) {
    if (!v.is_string()) fail(where, ": field \"dtype\" must be a string, got ", v.dump());
    const std::string s = v.get<std::string>();
    std::optional<DType> t = parse_dtype(s);
    if (!t) fail(where, ": field \"dtype\" has unsupported value \"", s, "\" (supported: ", supported_dtypes(), ")");
    return *t;
  }

  static std::vector<int64_t> parse_shape_field(const std::string& where, const json& v) {
    if (!v.is_array()) fail(where, ": field \"shape\" must be an array of integers, got ", v.dump());
    std::vector<int64_t> shape;
    for (const json& d : v) {
      std::optional<int64_t> n = as_int64(d);
      if (!n) fail(where, ": field \"shape\" must be an array of integers, got ", v.dump());
      if (*n < 0) fail(where, ": field \"shape\" ", v.dump(), " has a negative dimension");
      shape.push_back(*n);
    }
    return shape;
  }

  // The byte ranges must tile the data section exactly: sorted by offset, no overlap, no gap,
  // starting at 0 and ending at its end (as HF's safetensors library requires).
  void check_layout(std::vector<Range>& ranges) const {
    std::sort(ranges.begin(), ranges.end(),
              [](const Range& a, const Range& b) { return std::tie(a.begin, a.end) < std::tie(b.begin, b.end); });
    uint64_t expected = 0;
    const std::string* prev = nullptr;
    for (const Range& r : ranges) {
      if (r.begin < expected)
        fail(path, ": tensors \"", *prev, "\" and \"", *r.name, "\" overlap in the data section (\"", *r.name,
             "\" starts at ", r.begin, ", before ", expected, ")");
      if (r.begin > expected)
        fail(path, ": gap of ", r.begin - expected, " bytes in the data section before tensor \"", *r.name,
             "\" (offsets ", expected, " to ", r.begin, " belong to no tensor)");
      expected = r.end;
      prev = r.name;
    }
    if (expected != data_size)
      fail(path, ": the last ", data_size - expected, " bytes of the data section (offsets ", expected, " to ",
           data_size, ") are not covered by any tensor");
  }

  // Points the view at its bytes in the map, or at an aligned copy when the file puts them at an
  // address that is not a multiple of the element size (legal in the format, UB to read in C++).
  void place_data(TensorView& t, uint64_t begin) {
    const uint8_t* p = data_section + begin;
    const size_t align = dtype_size(t.dtype);
    if (reinterpret_cast<uintptr_t>(p) % align == 0) {
      t.data = p;
      return;
    }
    // operator new[] aligns to at least __STDCPP_DEFAULT_NEW_ALIGNMENT__, enough for every dtype.
    static_assert(__STDCPP_DEFAULT_NEW_ALIGNMENT__ >= 8);
    auto copy = std::make_unique_for_overwrite<uint8_t[]>(t.nbytes);
    std::memcpy(copy.get(), p, t.nbytes);
    t.data = copy.get();
    out.aligned_copies_.push_back(std::move(copy));
  }
};

std::unique_ptr<SafetensorsFile> SafetensorsFile::open(const std::string& path, const MapOptions& map) {
  auto f = std::make_unique<SafetensorsFile>();
  f->file_ = MappedFile(path, map);
  SafetensorsParser{*f, f->file_.path()}.run();
  return f;
}

// ---- TensorStore ----

namespace {

// A shard name from the index must stay inside the checkpoint folder.
void check_shard_name(const std::string& index_path, const std::string& tensor, const std::string& shard) {
  const fs::path p(shard);
  bool ok = !shard.empty() && p.is_relative();
  for (const auto& part : p) ok = ok && part != "..";
  if (!ok)
    fail(index_path, ": weight_map puts tensor \"", tensor, "\" in \"", shard,
         "\", which is not a file name inside the checkpoint folder");
}

// weight_map of model.safetensors.index.json: tensor name -> shard file name.
std::map<std::string, std::string> read_weight_map(const std::string& index_path) {
  MappedFile file(index_path);
  json doc = parse_json_strict(std::string_view(reinterpret_cast<const char*>(file.data()), file.size()), index_path,
                               "index", "key");
  if (!doc.is_object()) fail(index_path, ": index is not a JSON object");
  if (auto meta = doc.find("metadata"); meta != doc.end() && !meta->is_object() && !meta->is_null())
    fail(index_path, ": field \"metadata\" must be an object");
  auto wm = doc.find("weight_map");
  if (wm == doc.end()) fail(index_path, ": missing field \"weight_map\"");
  if (!wm->is_object()) fail(index_path, ": field \"weight_map\" must be an object of tensor name to shard file");
  std::map<std::string, std::string> out;
  for (auto& [name, shard] : wm->items()) {
    if (!shard.is_string())
      fail(index_path, ": weight_map entry for tensor \"", name, "\" must be a shard file name (string)");
    check_shard_name(index_path, name, shard.get<std::string>());
    out[name] = shard.get<std::string>();
  }
  return out;
}

}  // namespace

TensorStore TensorStore::open_file(const std::string& path, const MapOptions& map) {
  TensorStore store;
  store.source_ = path;
  store.files_.push_back(SafetensorsFile::open(path, map));
  for (const auto& [name, view] : store.files_.back()->tensors()) store.index_[name] = &view;
  return store;
}

TensorStore TensorStore::open_dir(const std::string& dir, const MapOptions& map) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) fail(dir, ": checkpoint folder does not exist or is not a folder");
  const fs::path single = fs::path(dir) / kSingleFile;
  if (fs::exists(single, ec)) {
    TensorStore store = open_file(single.string(), map);
    store.source_ = dir;
    return store;
  }
  const fs::path index = fs::path(dir) / kIndexFile;
  if (!fs::exists(index, ec)) fail(dir, ": no ", kSingleFile, " or ", kIndexFile, " in the checkpoint folder");
  const std::string index_path = index.string();
  const std::map<std::string, std::string> weight_map = read_weight_map(index_path);

  std::map<std::string, std::vector<std::string>> names_by_shard;
  for (const auto& [name, shard] : weight_map) names_by_shard[shard].push_back(name);

  TensorStore store;
  store.source_ = dir;
  for (const auto& [shard, names] : names_by_shard) {
    const fs::path shard_path = fs::path(dir) / shard;
    if (!fs::exists(shard_path, ec))
      fail(index_path, ": weight_map names shard \"", shard, "\" (for tensor \"", names.front(), "\") but ",
           shard_path.string(), " does not exist");
    store.files_.push_back(SafetensorsFile::open(shard_path.string(), map));
    const SafetensorsFile& file = *store.files_.back();
    for (const std::string& name : names) {
      if (!file.tensors().count(name))
        fail(index_path, ": weight_map puts tensor \"", name, "\" in \"", shard, "\", but that shard has no such tensor");
    }
    // Every tensor of the shard must be listed, and listed under this shard (which also makes
    // names unique across shards, since weight_map names one shard per tensor).
    for (const auto& [name, view] : file.tensors()) {
      auto listed = weight_map.find(name);
      if (listed == weight_map.end())
        fail(shard_path.string(), ": tensor \"", name, "\" is not listed in ", index_path);
      if (listed->second != shard)
        fail(shard_path.string(), ": tensor \"", name, "\" is also in this shard, but ", index_path, " puts it in \"",
             listed->second, "\"");
      if (!store.index_.emplace(name, &view).second)
        fail(shard_path.string(), ": tensor \"", name, "\" appears in more than one shard");
    }
  }
  return store;
}

const TensorView* TensorStore::find(const std::string& name) const {
  auto it = index_.find(name);
  return it == index_.end() ? nullptr : it->second;
}

const TensorView& TensorStore::get(const std::string& name) const {
  const TensorView* t = find(name);
  if (!t) fail(source_, ": missing tensor ", name);
  return *t;
}

const TensorView& TensorStore::get(const std::string& name, const std::vector<int64_t>& expected_shape) const {
  const TensorView& t = get(name);
  if (t.shape != expected_shape)
    fail(source_, ": tensor ", name, " has shape ", shape_str(t.shape), " but the config implies ",
         shape_str(expected_shape));
  return t;
}

std::vector<std::string> TensorStore::names() const {
  std::vector<std::string> out;
  out.reserve(index_.size());
  for (const auto& [name, view] : index_) out.push_back(name);
  return out;
}

uint64_t TensorStore::total_bytes() const {
  uint64_t n = 0;
  for (const auto& [name, view] : index_) n += view->nbytes;
  return n;
}

}  // namespace m3
