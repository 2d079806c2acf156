#include "base/mapped_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

#include "m3/error.h"

namespace m3 {

namespace {

// The whole file into fresh anonymous pages (page-aligned, like a mapping).
void* read_whole(int fd, size_t size, const std::string& path) {
  void* p = ::mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
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
      p = ::mmap(nullptr, size_, PROT_READ, MAP_PRIVATE, fd, 0);
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

}  // namespace m3
