// safetensors reader and writer: round trips (single file and shards, every dtype), misaligned
// data, one test per malformed-input rule, and a mutation test that must never crash.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "m3/error.h"
#include "base/mapped_file.h"
#include "io/safetensors.h"

namespace fs = std::filesystem;
using m3::DType;
using m3::SafetensorsFile;
using m3::TensorData;
using m3::TensorStore;

namespace {

// A fresh folder under the system temp dir, removed with everything in it at the end of the test.
class TempDir {
 public:
  TempDir() {
    static int counter = 0;
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    path_ = fs::temp_directory_path() /
            ("m3_safetensors_" + std::to_string(::getpid()) + "_" + std::to_string(counter++) + "_" +
             (info ? info->name() : "x"));
    fs::remove_all(path_);
    fs::create_directories(path_);
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  std::string file(const std::string& name) const { return (path_ / name).string(); }
  const fs::path& path() const { return path_; }

 private:
  fs::path path_;
};

const std::vector<DType> kAllDtypes = {DType::BF16, DType::F16,  DType::F32, DType::F8_E4M3,
                                       DType::U8,   DType::I32, DType::I64};

// A tensor with deterministic pseudo-random bytes (the tests compare bytes, not values).
TensorData make_tensor(const std::string& name, DType dtype, std::vector<int64_t> shape, uint32_t seed) {
  TensorData t;
  t.name = name;
  t.dtype = dtype;
  t.shape = std::move(shape);
  t.bytes.resize(*m3::tensor_nbytes(dtype, t.shape));
  std::mt19937 rng(seed);
  for (auto& b : t.bytes) b = uint8_t(rng());
  return t;
}

std::vector<TensorData> all_dtype_tensors() {
  std::vector<TensorData> out;
  uint32_t seed = 1;
  for (DType d : kAllDtypes) {
    const std::string n(m3::dtype_name(d));
    out.push_back(make_tensor("w." + n, d, {3, 5}, seed++));
    out.push_back(make_tensor("v." + n, d, {7}, seed++));       // odd sizes misalign later tensors
    out.push_back(make_tensor("s." + n, d, {}, seed++));        // scalar
    out.push_back(make_tensor("e." + n, d, {0, 4}, seed++));    // empty
  }
  return out;
}

void expect_same(const TensorData& want, const m3::TensorView& got) {
  EXPECT_EQ(got.name, want.name);
  EXPECT_EQ(got.dtype, want.dtype) << want.name;
  EXPECT_EQ(got.shape, want.shape) << want.name;
  ASSERT_EQ(got.nbytes, want.bytes.size()) << want.name;
  EXPECT_EQ(reinterpret_cast<uintptr_t>(got.data) % m3::dtype_size(got.dtype), 0u) << want.name;
  if (got.nbytes) {
    EXPECT_EQ(std::memcmp(got.data, want.bytes.data(), got.nbytes), 0) << want.name;
  }
}

std::vector<uint8_t> read_bytes(const std::string& path) {
  std::ifstream is(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(is), std::istreambuf_iterator<char>()};
}

void write_bytes(const std::string& path, const std::vector<uint8_t>& bytes) {
  std::ofstream os(path, std::ios::binary | std::ios::trunc);
  os.write(reinterpret_cast<const char*>(bytes.data()), std::streamsize(bytes.size()));
}

void write_text(const std::string& path, const std::string& text) {
  std::ofstream os(path, std::ios::binary | std::ios::trunc);
  os << text;
}

// A safetensors file from a literal header (no padding added) and data bytes.
void write_raw(const std::string& path, const std::string& header, const std::vector<uint8_t>& data,
               uint64_t header_len_override = UINT64_MAX) {
  std::vector<uint8_t> bytes(8);
  const uint64_t n = header_len_override == UINT64_MAX ? header.size() : header_len_override;
  for (int i = 0; i < 8; ++i) bytes[i] = uint8_t(n >> (8 * i));
  bytes.insert(bytes.end(), header.begin(), header.end());
  bytes.insert(bytes.end(), data.begin(), data.end());
  write_bytes(path, bytes);
}

// The m3::Error message of `f`, or "" when it did not throw (any other exception fails the test).
template <typename F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const m3::Error& e) {
    return e.what();
  }
  return "";
}

std::string open_error(const std::string& path) {
  return error_of([&] { SafetensorsFile::open(path); });
}

// Checks that `msg` is a non-empty, one-line error message containing every one of the words.
#define EXPECT_MESSAGE_HAS(msg, ...)                                                          \
  do {                                                                                       \
    const std::string m3_msg_ = (msg);                                                       \
    EXPECT_FALSE(m3_msg_.empty()) << "expected an m3::Error";                                \
    for (const std::string& w : std::initializer_list<std::string>{__VA_ARGS__})             \
      EXPECT_NE(m3_msg_.find(w), std::string::npos) << "missing \"" << w << "\" in: " << m3_msg_; \
    EXPECT_EQ(m3_msg_.find('\n'), std::string::npos) << "not one line: " << m3_msg_;         \
  } while (0)

// Opens a raw file built from `header` and `data`; the error must name the file and the words.
#define EXPECT_RAW_ERROR(header, data, ...)                  \
  do {                                                      \
    TempDir dir_;                                           \
    const std::string p_ = dir_.file("bad.safetensors");    \
    write_raw(p_, header, data);                            \
    EXPECT_MESSAGE_HAS(open_error(p_), p_, __VA_ARGS__);    \
  } while (0)

std::vector<uint8_t> zeros(size_t n) { return std::vector<uint8_t>(n, 0); }

}  // namespace

// ---- round trips ----

TEST(Safetensors, RoundTripSingleFileAllDtypes) {
  TempDir dir;
  const auto tensors = all_dtype_tensors();
  const std::string path = dir.file("one.safetensors");
  m3::write_safetensors(path, tensors, {{"format", "pt"}, {"note", "hello"}});
  EXPECT_FALSE(fs::exists(path + ".tmp"));

  // The data section starts at a multiple of 8.
  const auto raw = read_bytes(path);
  uint64_t header_len = 0;
  for (int i = 7; i >= 0; --i) header_len = (header_len << 8) | raw[i];
  EXPECT_EQ((8 + header_len) % 8, 0u);

  auto f = SafetensorsFile::open(path);
  ASSERT_EQ(f->tensors().size(), tensors.size());
  for (const auto& t : tensors) expect_same(t, f->tensors().at(t.name));
  EXPECT_EQ(f->metadata().at("note"), "hello");
  EXPECT_EQ(f->metadata().at("format"), "pt");

  // Tensors are laid out in the order given.
  auto header = nlohmann::ordered_json::parse(raw.begin() + 8, raw.begin() + 8 + header_len);
  std::vector<std::string> order;
  for (auto& [k, v] : header.items())
    if (k != "__metadata__") order.push_back(k);
  ASSERT_EQ(order.size(), tensors.size());
  for (size_t i = 0; i < tensors.size(); ++i) EXPECT_EQ(order[i], tensors[i].name);

  const auto& w = f->tensors().at("w.BF16");
  EXPECT_EQ(w.numel(), 15);
  EXPECT_EQ(w.describe(), "w.BF16 [3, 5] BF16 (" + path + ")");
}

TEST(Safetensors, RoundTripShardedAllDtypes) {
  TempDir dir;
  const auto tensors = all_dtype_tensors();
  uint64_t total = 0;
  for (const auto& t : tensors) total += t.bytes.size();
  const std::string ckpt = dir.file("ckpt");
  m3::write_checkpoint_tensors(ckpt, tensors, 64);  // forces many shards

  EXPECT_FALSE(fs::exists(ckpt + "/model.safetensors"));
  const auto index = nlohmann::json::parse(read_bytes(ckpt + "/model.safetensors.index.json"));
  EXPECT_EQ(index["metadata"]["total_size"].get<uint64_t>(), total);
  std::set<std::string> shards;
  for (auto& [name, shard] : index["weight_map"].items()) shards.insert(shard.get<std::string>());
  ASSERT_GE(shards.size(), 3u);
  const std::string n = std::to_string(shards.size());
  const std::string last = "model-" + std::string(5 - n.size(), '0') + n + "-of-" + std::string(5 - n.size(), '0') + n + ".safetensors";
  EXPECT_TRUE(shards.count("model-00001-of-" + std::string(5 - n.size(), '0') + n + ".safetensors"));
  EXPECT_TRUE(shards.count(last));
  for (const auto& s : shards) EXPECT_TRUE(fs::exists(ckpt + "/" + s)) << s;

  TensorStore store = TensorStore::open_dir(ckpt);
  EXPECT_EQ(store.source(), ckpt);
  ASSERT_EQ(store.size(), tensors.size());
  EXPECT_EQ(store.total_bytes(), total);
  for (const auto& t : tensors) expect_same(t, store.get(t.name, t.shape));
  EXPECT_EQ(store.names().size(), tensors.size());
}

TEST(Safetensors, CheckpointFitsInOneFile) {
  TempDir dir;
  const auto tensors = all_dtype_tensors();
  const std::string ckpt = dir.file("ckpt");
  m3::write_checkpoint_tensors(ckpt, tensors, 64);  // sharded first ...
  m3::write_checkpoint_tensors(ckpt, tensors, uint64_t(1) << 30);  // ... then one file replaces it
  EXPECT_TRUE(fs::exists(ckpt + "/model.safetensors"));
  EXPECT_FALSE(fs::exists(ckpt + "/model.safetensors.index.json"));
  TensorStore store = TensorStore::open_dir(ckpt);
  ASSERT_EQ(store.size(), tensors.size());
  for (const auto& t : tensors) expect_same(t, store.get(t.name));
  EXPECT_EQ(store.find("nope"), nullptr);

  TensorStore single = TensorStore::open_file(ckpt + "/model.safetensors");
  EXPECT_EQ(single.size(), tensors.size());
}

TEST(Safetensors, EmptyFileWithNoTensors) {
  TempDir dir;
  m3::write_safetensors(dir.file("e.safetensors"), {});
  auto f = SafetensorsFile::open(dir.file("e.safetensors"));
  EXPECT_TRUE(f->tensors().empty());
}

// The weights' file mapped and read into memory (--no-mmap): the file's bytes either way, starting
// at a 2 MiB boundary (the condition for the kernel to back them with huge pages), for sizes below
// a page, between pages and above 2 MiB; the two views of one file live side by side. The same for
// the benchmarks' buffers.
TEST(MappedFile, MappedAndReadGiveTheFileBytesAtAHugePageBoundary) {
  TempDir dir;
  std::mt19937 rng(7);
  for (const size_t size : {size_t(1), size_t(4097), (size_t(3) << 20) + 5}) {
    std::vector<uint8_t> bytes(size);
    for (auto& b : bytes) b = uint8_t(rng());
    const std::string path = dir.file(std::to_string(size) + ".bin");
    write_bytes(path, bytes);
    const m3::MappedFile mapped(path, {.map = true});
    const m3::MappedFile read(path, {.map = false});
    for (const m3::MappedFile* f : {&mapped, &read}) {
      ASSERT_EQ(f->size(), size);
      EXPECT_EQ(reinterpret_cast<uintptr_t>(f->data()) % (uintptr_t(2) << 20), 0u) << size;
      EXPECT_EQ(std::memcmp(f->data(), bytes.data(), size), 0) << size;
    }
    // The benchmarks' stand-in for mapped weights: placed alike, zeroed and writable.
    m3::HugePageBuffer buffer(size);
    ASSERT_EQ(buffer.size(), size);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(buffer.data()) % (uintptr_t(2) << 20), 0u) << size;
    EXPECT_EQ(std::count(buffer.data(), buffer.data() + size, 0), std::ptrdiff_t(size));
    std::memcpy(buffer.data(), bytes.data(), size);
    EXPECT_EQ(buffer.data()[size - 1], bytes[size - 1]);
  }
}

// U8 of 3 bytes, then F32 and BF16 at offsets that are not multiples of their size.
TEST(Safetensors, UnalignedOffsetsAreCopiedAligned) {
  TempDir dir;
  const std::string path = dir.file("u.safetensors");
  std::string header =
      R"({"a":{"dtype":"U8","shape":[3],"data_offsets":[0,3]},)"
      R"("b":{"dtype":"F32","shape":[2],"data_offsets":[3,11]},)"
      R"("c":{"dtype":"BF16","shape":[1],"data_offsets":[11,13]}})";
  header.append((8 - (8 + header.size()) % 8) % 8, ' ');  // data section 8-aligned: b, c misaligned
  std::vector<uint8_t> data = {7, 8, 9};
  const float fb[2] = {1.5f, -2.25f};
  data.resize(11);
  std::memcpy(data.data() + 3, fb, 8);
  const uint16_t c = m3::f32_to_bf16(3.0f);
  data.push_back(uint8_t(c & 0xff));
  data.push_back(uint8_t(c >> 8));
  write_raw(path, header, data);

  auto f = SafetensorsFile::open(path);
  const auto& a = f->tensors().at("a");
  EXPECT_EQ(a.data[0], 7);
  EXPECT_EQ(a.data[2], 9);
  const auto& b = f->tensors().at("b");
  ASSERT_EQ(reinterpret_cast<uintptr_t>(b.data) % 4, 0u);
  const float* bf = reinterpret_cast<const float*>(b.data);
  EXPECT_EQ(bf[0], 1.5f);
  EXPECT_EQ(bf[1], -2.25f);
  const auto& cv = f->tensors().at("c");
  ASSERT_EQ(reinterpret_cast<uintptr_t>(cv.data) % 2, 0u);
  EXPECT_EQ(m3::bf16_to_f32(*reinterpret_cast<const uint16_t*>(cv.data)), 3.0f);
}

// ---- malformed files: one rule each ----

TEST(SafetensorsErrors, FileShorterThanLengthField) {
  TempDir dir;
  const std::string p = dir.file("short.safetensors");
  write_bytes(p, {1, 2, 3, 4, 5});
  EXPECT_MESSAGE_HAS(open_error(p), p, "shorter than the 8-byte");
}

TEST(SafetensorsErrors, MissingFile) {
  TempDir dir;
  EXPECT_MESSAGE_HAS(open_error(dir.file("none.safetensors")), "none.safetensors", "cannot open");
}

TEST(SafetensorsErrors, HeaderLengthPastEndOfFile) {
  TempDir dir;
  const std::string p = dir.file("b.safetensors");
  write_raw(p, "{}", {}, 1000);
  EXPECT_MESSAGE_HAS(open_error(p), p, "header length 1000", "past the end of the file");
}

TEST(SafetensorsErrors, HugeHeaderLength) {
  TempDir dir;
  const std::string p = dir.file("b.safetensors");
  write_raw(p, "{}", {}, uint64_t(1) << 40);
  EXPECT_MESSAGE_HAS(open_error(p), p, "exceeds the limit");
  write_raw(p, "{}", {}, UINT64_MAX - 1);  // would overflow 8 + n
  EXPECT_MESSAGE_HAS(open_error(p), p, "header length");
}

TEST(SafetensorsErrors, BadJson) {
  EXPECT_RAW_ERROR(R"({"a": {"dtype": )", {}, "not valid JSON");
  EXPECT_RAW_ERROR("{\"a\xff\": 1}", {}, "not valid JSON");  // ill-formed UTF-8
  EXPECT_RAW_ERROR(std::string(100, '['), {}, "nested deeper");
}

TEST(SafetensorsErrors, HeaderNotObject) { EXPECT_RAW_ERROR("[1, 2]", {}, "not a JSON object"); }

TEST(SafetensorsErrors, EntryNotObject) { EXPECT_RAW_ERROR(R"({"a": 5})", {}, "tensor \"a\"", "not an object"); }

TEST(SafetensorsErrors, MissingFields) {
  EXPECT_RAW_ERROR(R"({"a":{"shape":[1],"data_offsets":[0,4]}})", zeros(4), "tensor \"a\"", "missing field \"dtype\"");
  EXPECT_RAW_ERROR(R"({"a":{"dtype":"F32","data_offsets":[0,4]}})", zeros(4), "tensor \"a\"", "missing field \"shape\"");
  EXPECT_RAW_ERROR(R"({"a":{"dtype":"F32","shape":[1]}})", zeros(4), "tensor \"a\"", "missing field \"data_offsets\"");
}

TEST(SafetensorsErrors, WrongFieldTypes) {
  EXPECT_RAW_ERROR(R"({"a":{"dtype":3,"shape":[1],"data_offsets":[0,4]}})", zeros(4), "tensor \"a\"", "\"dtype\"", "string");
  EXPECT_RAW_ERROR(R"({"a":{"dtype":"F32","shape":"1","data_offsets":[0,4]}})", zeros(4), "tensor \"a\"", "\"shape\"", "array of integers");
  EXPECT_RAW_ERROR(R"({"a":{"dtype":"F32","shape":[1.5],"data_offsets":[0,4]}})", zeros(4), "tensor \"a\"", "\"shape\"");
  EXPECT_RAW_ERROR(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":{"b":0}}})", zeros(4), "tensor \"a\"", "\"data_offsets\"", "[begin, end]");
}

TEST(SafetensorsErrors, UnknownDtype) {
  EXPECT_RAW_ERROR(R"({"a":{"dtype":"Q4_K","shape":[1],"data_offsets":[0,4]}})", zeros(4), "tensor \"a\"",
                   "unsupported", "Q4_K", "BF16");
}

TEST(SafetensorsErrors, NegativeDimension) {
  EXPECT_RAW_ERROR(R"({"a":{"dtype":"F32","shape":[2,-1],"data_offsets":[0,4]}})", zeros(4), "tensor \"a\"", "negative");
}

TEST(SafetensorsErrors, NumelOverflow) {
  EXPECT_RAW_ERROR(R"({"a":{"dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,4]}})", zeros(4),
                   "tensor \"a\"", "overflow");
  EXPECT_RAW_ERROR(R"({"a":{"dtype":"F32","shape":[18446744073709551615],"data_offsets":[0,4]}})", zeros(4),
                   "tensor \"a\"", "\"shape\"");
}

TEST(SafetensorsErrors, OffsetsNotAPair) {
  EXPECT_RAW_ERROR(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0]}})", zeros(4), "\"data_offsets\"", "[begin, end]");
  EXPECT_RAW_ERROR(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4,8]}})", zeros(4), "\"data_offsets\"", "[begin, end]");
  EXPECT_RAW_ERROR(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[-4,0]}})", zeros(4), "\"data_offsets\"", "non-negative");
  EXPECT_RAW_ERROR(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[4,0]}})", zeros(4), "\"data_offsets\"", "begin after end");
}

TEST(SafetensorsErrors, OffsetsPastDataSection) {
  EXPECT_RAW_ERROR(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})", zeros(4), "tensor \"a\"",
                   "past the end of the data section");
}

TEST(SafetensorsErrors, WrongByteSize) {
  EXPECT_RAW_ERROR(R"({"a":{"dtype":"F32","shape":[2,3],"data_offsets":[0,20]}})", zeros(20), "tensor \"a\"",
                   "spans 20 bytes", "[2, 3]", "needs 24");
}

TEST(SafetensorsErrors, OverlappingRanges) {
  EXPECT_RAW_ERROR(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                   R"("b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})",
                   zeros(12), "\"a\"", "\"b\"", "overlap");
}

TEST(SafetensorsErrors, GapBetweenTensors) {
  EXPECT_RAW_ERROR(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},)"
                   R"("b":{"dtype":"F32","shape":[1],"data_offsets":[8,12]}})",
                   zeros(12), "gap of 4 bytes", "\"b\"");
  EXPECT_RAW_ERROR(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})", zeros(8), "gap of 4 bytes", "\"a\"");
}

TEST(SafetensorsErrors, TrailingBytesNotCovered) {
  EXPECT_RAW_ERROR(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})", zeros(10), "last 6 bytes",
                   "not covered");
}

TEST(SafetensorsErrors, DuplicateNames) {
  EXPECT_RAW_ERROR(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},)"
                   R"("a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})",
                   zeros(8), "duplicate tensor name \"a\"");
  EXPECT_RAW_ERROR(R"({"a":{"dtype":"F32","dtype":"F16","shape":[1],"data_offsets":[0,4]}})", zeros(4),
                   "duplicate key \"dtype\"", "\"a\"");
}

TEST(SafetensorsErrors, BadMetadata) {
  EXPECT_RAW_ERROR(R"({"__metadata__":[1]})", {}, "__metadata__", "object of string to string");
  EXPECT_RAW_ERROR(R"({"__metadata__":{"k":1}})", {}, "__metadata__", "\"k\"", "string");
  EXPECT_RAW_ERROR(R"({"__metadata__":{"k":{"x":"y"}}})", {}, "__metadata__", "\"k\"");
}

// ---- TensorStore ----

TEST(TensorStoreErrors, MissingTensorAndShapeMismatch) {
  TempDir dir;
  const std::string ckpt = dir.file("ckpt");
  m3::write_checkpoint_tensors(ckpt, {make_tensor("a", DType::F32, {2, 3}, 1)}, 1 << 20);
  TensorStore store = TensorStore::open_dir(ckpt);
  EXPECT_MESSAGE_HAS(error_of([&] { store.get("nope"); }), ckpt + ": missing tensor nope");
  EXPECT_MESSAGE_HAS(error_of([&] { store.get("nope", {1}); }), "missing tensor nope");
  EXPECT_MESSAGE_HAS(error_of([&] { store.get("a", {3, 2}); }),
                     ckpt + ": tensor a has shape [2, 3] but the config implies [3, 2]");
  EXPECT_NO_THROW(store.get("a", {2, 3}));
}

TEST(TensorStoreErrors, MissingOrEmptyFolder) {
  TempDir dir;
  EXPECT_MESSAGE_HAS(error_of([&] { TensorStore::open_dir(dir.file("absent")); }), "absent", "does not exist");
  EXPECT_MESSAGE_HAS(error_of([&] { TensorStore::open_dir(dir.path().string()); }), "no model.safetensors",
                     "model.safetensors.index.json");
}

// A sharded checkpoint of tensors a, b, c (one per shard) whose index the test then rewrites.
class ShardedIndex : public ::testing::Test {
 protected:
  void SetUp() override {
    ckpt = dir.file("ckpt");
    m3::write_checkpoint_tensors(ckpt,
                                 {make_tensor("a", DType::F32, {4}, 1), make_tensor("b", DType::F32, {4}, 2),
                                  make_tensor("c", DType::F32, {4}, 3)},
                                 16);
    index = ckpt + "/model.safetensors.index.json";
    doc = nlohmann::json::parse(read_bytes(index));
    ASSERT_EQ(doc["weight_map"]["b"], "model-00002-of-00003.safetensors");
  }
  std::string open_with(const nlohmann::json& d) {
    write_text(index, d.dump());
    return error_of([&] { TensorStore::open_dir(ckpt); });
  }
  TempDir dir;
  std::string ckpt, index;
  nlohmann::json doc;
};

TEST_F(ShardedIndex, ValidOpens) { EXPECT_EQ(open_with(doc), ""); }

TEST_F(ShardedIndex, MissingShard) {
  doc["weight_map"]["b"] = "model-00009-of-00009.safetensors";
  EXPECT_MESSAGE_HAS(open_with(doc), index, "model-00009-of-00009.safetensors", "does not exist");
}

TEST_F(ShardedIndex, TensorNotInNamedShard) {
  doc["weight_map"]["x"] = "model-00001-of-00003.safetensors";
  EXPECT_MESSAGE_HAS(open_with(doc), index, "\"x\"", "no such tensor");
}

TEST_F(ShardedIndex, TensorListedUnderWrongShard) {
  doc["weight_map"]["b"] = "model-00001-of-00003.safetensors";
  EXPECT_MESSAGE_HAS(open_with(doc), "\"b\"", "no such tensor");
}

TEST_F(ShardedIndex, ShardTensorNotListed) {
  // Shard 3 gains a tensor "z" that the index does not mention.
  m3::write_safetensors(ckpt + "/model-00003-of-00003.safetensors",
                        {make_tensor("c", DType::F32, {4}, 3), make_tensor("z", DType::F32, {4}, 4)});
  EXPECT_MESSAGE_HAS(open_with(doc), "model-00003-of-00003.safetensors", "\"z\"", "not listed");
}

TEST_F(ShardedIndex, SameTensorInTwoShards) {
  // Shard 3 now holds "a" too; the index (which can only name one shard) lists it in shard 1.
  m3::write_safetensors(ckpt + "/model-00003-of-00003.safetensors",
                        {make_tensor("a", DType::F32, {4}, 9), make_tensor("c", DType::F32, {4}, 3)});
  EXPECT_MESSAGE_HAS(open_with(doc), "\"a\"", "model-00001-of-00003.safetensors");
}

TEST_F(ShardedIndex, MalformedIndex) {
  EXPECT_MESSAGE_HAS(open_with(nlohmann::json::array()), index, "not a JSON object");
  EXPECT_MESSAGE_HAS(open_with({{"metadata", nlohmann::json::object()}}), index, "weight_map");
  EXPECT_MESSAGE_HAS(open_with({{"weight_map", {{"a", 1}}}}), index, "\"a\"", "shard file name");
  EXPECT_MESSAGE_HAS(open_with({{"weight_map", {{"a", "../x.safetensors"}}}}), index, "inside the checkpoint folder");
  write_text(index, R"({"weight_map": {"a": "model-00001-of-00003.safetensors", "a": "model-00002-of-00003.safetensors"}})");
  EXPECT_MESSAGE_HAS(error_of([&] { TensorStore::open_dir(ckpt); }), "duplicate key \"a\"", "weight_map");
  write_text(index, "{");
  EXPECT_MESSAGE_HAS(error_of([&] { TensorStore::open_dir(ckpt); }), index, "not valid JSON");
}

// ---- writer errors ----

TEST(SafetensorsWriter, RejectsWrongByteSizeAndLeavesNoFile) {
  TempDir dir;
  const std::string p = dir.file("w.safetensors");
  TensorData t = make_tensor("a", DType::BF16, {2, 3}, 1);
  t.bytes.pop_back();
  EXPECT_MESSAGE_HAS(error_of([&] { m3::write_safetensors(p, {t}); }), p, "\"a\"", "11 bytes", "needs 12");
  EXPECT_FALSE(fs::exists(p));
  EXPECT_FALSE(fs::exists(p + ".tmp"));
}

TEST(SafetensorsWriter, RejectsDuplicateAndReservedNames) {
  TempDir dir;
  const std::string p = dir.file("w.safetensors");
  const TensorData a = make_tensor("a", DType::F32, {1}, 1);
  EXPECT_MESSAGE_HAS(error_of([&] { m3::write_safetensors(p, {a, a}); }), "duplicate tensor name \"a\"");
  TensorData m = a;
  m.name = "__metadata__";
  EXPECT_MESSAGE_HAS(error_of([&] { m3::write_safetensors(p, {m}); }), "__metadata__");
  TensorData neg = a;
  neg.shape = {-1};
  EXPECT_MESSAGE_HAS(error_of([&] { m3::write_safetensors(p, {neg}); }), "invalid shape [-1]");
}

// ---- mutation test: corrupt a valid file at random; open() must succeed or throw m3::Error ----

TEST(SafetensorsFuzz, MutatedHeadersNeverCrash) {
  TempDir dir;
  const std::string valid_path = dir.file("valid.safetensors");
  m3::write_safetensors(valid_path,
                        {make_tensor("a", DType::U8, {3}, 1), make_tensor("b", DType::F32, {2, 2}, 2),
                         make_tensor("c", DType::BF16, {5}, 3), make_tensor("d", DType::I64, {1}, 4)},
                        {{"k", "v"}});
  const std::vector<uint8_t> valid = read_bytes(valid_path);
  uint64_t header_len = 0;
  for (int i = 7; i >= 0; --i) header_len = (header_len << 8) | valid[i];
  const size_t header_end = size_t(8 + header_len);

  std::mt19937 rng(20261105);
  const std::string interesting = "{}[]\":,-0123456789 eE.\\xFDtrufalsn";
  int opened = 0, rejected = 0;
  for (int iter = 0; iter < 4000; ++iter) {
    std::vector<uint8_t> bytes = valid;
    const int mutations = 1 + int(rng() % 3);
    for (int m = 0; m < mutations && !bytes.empty(); ++m) {
      const size_t limit = std::min(bytes.size(), header_end);  // mostly the length field and header
      const size_t at = rng() % limit;
      switch (rng() % 6) {
        case 0: bytes[at] ^= uint8_t(1u << (rng() % 8)); break;
        case 1: bytes[at] = uint8_t(interesting[rng() % interesting.size()]); break;
        case 2: bytes[at] = uint8_t(rng()); break;
        case 3: bytes.resize(rng() % (bytes.size() + 1)); break;  // truncate
        case 4: bytes.erase(bytes.begin() + long(at)); break;     // shift the rest of the header
        case 5: bytes.insert(bytes.begin() + long(at), uint8_t(interesting[rng() % interesting.size()])); break;
      }
    }
    // A fresh name each time: rewriting one file in place makes ext4 flush it to disk on close.
    const std::string p = dir.file("mutant" + std::to_string(iter) + ".safetensors");
    write_bytes(p, bytes);
    try {
      auto f = SafetensorsFile::open(p);
      // Touch every byte of every tensor: all views must lie inside the mapping.
      unsigned sum = 0;
      for (const auto& [name, t] : f->tensors())
        for (size_t i = 0; i < t.nbytes; ++i) sum += t.data[i];
      (void)sum;
      ++opened;
    } catch (const m3::Error&) {
      ++rejected;
    } catch (const std::exception& e) {
      ADD_FAILURE() << "iteration " << iter << ": non-m3::Error exception: " << e.what();
    }
    fs::remove(p);
  }
  EXPECT_GT(rejected, 0);
  std::printf("mutants: %d opened, %d rejected\n", opened, rejected);
}
