#include "base/mapped_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <utility>

#include "m3/error.h"

namespace m3 {

namespace {

constexpr uintptr_t kHugePageBytes = uintptr_t(2) << 20;

// `size` bytes of the file fd (or of fresh anonymous memory, fd < 0) mapped at a 2 MiB boundary
// and advised onto transparent huge pages. Weights are read as long streams, and on 2 MiB pages
// a bf16 decode step reads them 15-38% faster than from the small pages a plain mapping gets
// (docs/BENCHMARKS.md §0zg). The kernel can use a huge page only where the virtual address and
// the file offset agree modulo 2 MiB, hence the boundary; a file's page cache gets 2 MiB folios
// where its filesystem supports large folios (XFS, ext4 since Linux 6.16) and the file is read
// after the advice; elsewhere the advice changes nothing.
void* map_on_huge_pages(size_t size, int prot, int flags, int fd) {
  const size_t span = size + kHugePageBytes;
  void* reserved = ::mmap(nullptr, span, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (reserved == MAP_FAILED) return MAP_FAILED;
  const uintptr_t base = reinterpret_cast<uintptr_t>(reserved);
  const uintptr_t start = (base + kHugePageBytes - 1) & ~(kHugePageBytes - 1);
  void* p = ::mmap(reinterpret_cast<void*>(start), size, prot, flags | MAP_FIXED, fd, 0);
  if (p == MAP_FAILED) {
    const int e = errno;
    ::munmap(reserved, span);
    errno = e;
    return MAP_FAILED;
  }
  // The reservation around the mapping goes back; the destructor unmaps [p, p + size).
  const uintptr_t page = uintptr_t(::sysconf(_SC_PAGESIZE));
  const uintptr_t end = (start + size + page - 1) & ~(page - 1);
  if (start > base) ::munmap(reserved, start - base);
  if (base + span > end) ::munmap(reinterpret_cast<void*>(end), base + span - end);
  ::madvise(p, size, MADV_HUGEPAGE);  // advice only: where THP is off it is refused or ignored
  return p;
}

// The whole file into fresh anonymous pages (at a huge-page boundary, like a mapping).
void* read_whole(int fd, size_t size, const std::string& path) {
  void* p = map_on_huge_pages(size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1);
  if (p == MAP_FAILED) fail(path, ": cannot allocate ", size, " bytes to read it into memory: ", std::strerror(errno));
  size_t done = 0;
  while (done < size) {
    const ssize_t n = ::pread(fd, static_cast<uint8_t*>(p) + done, size - done, off_t(done));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const int e = n < 0 ? errno : 0;
      ::munmap(p, size);
      fail(path, ": read failed at byte ", done, " of ", size, ": ", e ? std::strerror(e) : "the file got shorter");
    }
    done += size_t(n);
  }
  ::mprotect(p, size, PROT_READ);
  return p;
}

}  // namespace

MappedFile::MappedFile(const std::string& path, const MapOptions& options) : path_(path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) fail(path, ": cannot open: ", std::strerror(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    int e = errno;
    ::close(fd);
    fail(path, ": cannot stat: ", std::strerror(e));
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    fail(path, ": not a regular file");
  }
  size_ = size_t(st.st_size);
  if (size_ > 0) {
    void* p = nullptr;
    if (options.map) {
      p = map_on_huge_pages(size_, PROT_READ, MAP_PRIVATE, fd);
      if (p == MAP_FAILED) {
        int e = errno;
        ::close(fd);
        fail(path, ": cannot map: ", std::strerror(e));
      }
    } else {
      try {
        p = read_whole(fd, size_, path);
      } catch (...) {
        ::close(fd);
        throw;
      }
    }
    data_ = static_cast<const uint8_t*>(p);
  }
  ::close(fd);
  if (options.lock && size_ > 0 && ::mlock(data_, size_) != 0) {
    const int e = errno;
    ::munmap(const_cast<uint8_t*>(data_), size_);
    data_ = nullptr;
    fail(path, ": cannot lock ", size_, " bytes in RAM (--mlock): ", std::strerror(e),
         e == ENOMEM || e == EPERM ? "; raise the locked-memory limit (ulimit -l, RLIMIT_MEMLOCK) or drop --mlock" : "");
  }
}

MappedFile::~MappedFile() {
  if (data_) ::munmap(const_cast<uint8_t*>(data_), size_);
}

MappedFile::MappedFile(MappedFile&& o) noexcept
    : path_(std::move(o.path_)), data_(std::exchange(o.data_, nullptr)), size_(std::exchange(o.size_, 0)) {}

MappedFile& MappedFile::operator=(MappedFile&& o) noexcept {
  if (this != &o) {
    if (data_) ::munmap(const_cast<uint8_t*>(data_), size_);
    path_ = std::move(o.path_);
    data_ = std::exchange(o.data_, nullptr);
    size_ = std::exchange(o.size_, 0);
  }
  return *this;
}

HugePageBuffer::HugePageBuffer(size_t size) : size_(size) {
  if (size == 0) return;
  void* p = map_on_huge_pages(size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1);
  if (p == MAP_FAILED) fail("cannot allocate ", size, " bytes on huge pages: ", std::strerror(errno));
  data_ = static_cast<uint8_t*>(p);
}

HugePageBuffer::~HugePageBuffer() {
  if (data_) ::munmap(data_, size_);
}

HugePageBuffer::HugePageBuffer(HugePageBuffer&& o) noexcept
    : data_(std::exchange(o.data_, nullptr)), size_(std::exchange(o.size_, 0)) {}

}  // namespace m3
