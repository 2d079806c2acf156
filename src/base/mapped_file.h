#pragma once
// A read-only memory map of a whole file. Checkpoint weights stay mapped: nothing is copied
// unless a tensor's bytes are misaligned for its element type (see io/safetensors), or the caller
// asks for the file to be read into memory (--no-mmap). Either way the bytes start at a 2 MiB
// boundary, advised onto transparent huge pages (mapped_file.cpp says when the kernel obliges).
#include <cstddef>
#include <cstdint>
#include <string>

namespace m3 {

struct MapOptions {
  // false: read the file into anonymous memory instead of mapping it (llama.cpp's --no-mmap: the
  // pages then count as the process's own, are never re-read from disk, and need swap to leave RAM).
  bool map = true;
  // Lock the pages in RAM (mlock) so they are never evicted; fails naming RLIMIT_MEMLOCK when the
  // limit is too low (ulimit -l).
  bool lock = false;
};

class MappedFile {
 public:
  MappedFile() = default;
  explicit MappedFile(const std::string& path, const MapOptions& options = {});  // throws m3::Error naming the path
  ~MappedFile();
  MappedFile(MappedFile&& o) noexcept;
  MappedFile& operator=(MappedFile&& o) noexcept;
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  const uint8_t* data() const { return data_; }
  size_t size() const { return size_; }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  const uint8_t* data_ = nullptr;
  size_t size_ = 0;
};

// Fresh zeroed writable memory placed as MappedFile places weights (a 2 MiB boundary, advised onto
// huge pages): for benchmarks whose buffers stand in for a checkpoint's weights. Throws m3::Error.
class HugePageBuffer {
 public:
  explicit HugePageBuffer(size_t size);
  ~HugePageBuffer();
  HugePageBuffer(HugePageBuffer&& o) noexcept;
  HugePageBuffer& operator=(HugePageBuffer&& o) = delete;
  HugePageBuffer(const HugePageBuffer&) = delete;
  HugePageBuffer& operator=(const HugePageBuffer&) = delete;

  uint8_t* data() const { return data_; }
  size_t size() const { return size_; }

 private:
  uint8_t* data_ = nullptr;
  size_t size_ = 0;
};

}  // namespace m3
