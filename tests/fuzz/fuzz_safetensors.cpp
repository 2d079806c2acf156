// Safetensors reader: the input is a whole .safetensors file (8-byte header length, JSON header,
// tensor bytes), opened from /dev/shm because the reader maps a path. A file that opens must
// describe only bytes inside itself: every tensor's size is what its dtype and shape say and its
// first and last byte can be read (ASan sees a read past an owned copy; a read past the mapping
// faults).
#include <cstdint>

#include "m3/error.h"
#include "fuzz_support.h"
#include "io/safetensors.h"

namespace {

// Touches a tensor's first and last byte; volatile so the reads are not optimised away.
void touch(const m3::TensorView& t) {
  if (t.nbytes == 0) return;
  const volatile uint8_t* p = t.data;
  (void)p[0];
  (void)p[t.nbytes - 1];
}

void check(const m3::TensorView& t) {
  const std::optional<uint64_t> expected = m3::tensor_nbytes(t.dtype, t.shape);
  if (!expected || *expected != t.nbytes)
    m3::fuzz::finding(m3::str_cat("accepted ", t.describe(), " with ", t.nbytes, " bytes"));
  if (t.nbytes != 0 && t.data == nullptr) m3::fuzz::finding("accepted " + t.describe() + " without data");
  (void)t.numel();
  touch(t);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static m3::fuzz::ScratchFile file(".safetensors");
  const std::string& path = file.write(data, size);
  try {
    const auto st = m3::SafetensorsFile::open(path);
    for (const auto& [name, view] : st->tensors()) check(view);
    // The store (how a checkpoint is opened) indexes the same file: same tensors, same checks.
    const m3::TensorStore store = m3::TensorStore::open_file(path);
    if (store.size() != st->tensors().size()) m3::fuzz::finding("the store and the file list different tensors");
    for (const std::string& name : store.names()) check(store.get(name));
  } catch (const m3::Error&) {
  }
  return 0;
}
