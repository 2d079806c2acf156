#include "memory/page_arena.h"

#include <sys/mman.h>

#include <cstdlib>
#include <cstring>
#include <mutex>
#include <new>
#include <unordered_map>
#include <vector>

#if defined(__SANITIZE_ADDRESS__)
#define M3_PAGE_ARENA 0
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define M3_PAGE_ARENA 0
#endif
#endif
#ifndef M3_PAGE_ARENA
#define M3_PAGE_ARENA 1
#endif

namespace m3 {

namespace {

constexpr size_t kChunkBytes = size_t(2) << 20;  // one x86-64 huge page; arm64's with 4 KiB pages too

std::shared_ptr<std::byte[]> allocator_page(size_t bytes) {
  const size_t rounded = (bytes + 63) / 64 * 64;
  auto* p = static_cast<std::byte*>(std::aligned_alloc(64, rounded == 0 ? 64 : rounded));
  if (p == nullptr) throw std::bad_alloc();
  std::memset(p, 0, rounded);
  return std::shared_ptr<std::byte[]>(p, [](std::byte* q) { std::free(q); });
}

// Free lists of carved pages by size. Never destroyed: pages may be dropped during static destruction.
class Arena {
 public:
  std::byte* take(size_t bytes) {
    std::lock_guard<std::mutex> lock(mu_);
    std::vector<std::byte*>& free = free_[bytes];
    if (free.empty()) carve(bytes, free);
    std::byte* p = free.back();
    free.pop_back();
    return p;
  }
  void give_back(std::byte* p, size_t bytes) {
    std::lock_guard<std::mutex> lock(mu_);
    free_[bytes].push_back(p);
  }

 private:
  // A new chunk cut into pages of `bytes` (a multiple of 64).
  static void carve(size_t bytes, std::vector<std::byte*>& free) {
    void* chunk = std::aligned_alloc(kChunkBytes, kChunkBytes);
    if (chunk == nullptr) throw std::bad_alloc();
    // A hint: without transparent huge pages (or with them off) the chunk is ordinary memory.
    madvise(chunk, kChunkBytes, MADV_HUGEPAGE);
    auto* base = static_cast<std::byte*>(chunk);
    const size_t n = kChunkBytes / bytes;
    free.reserve(free.size() + n);
    for (size_t i = n; i-- > 0;) free.push_back(base + i * bytes);  // handed out in address order
  }

  std::mutex mu_;
  std::unordered_map<size_t, std::vector<std::byte*>> free_;
};

Arena& arena() {
  static Arena* a = new Arena;
  return *a;
}

}  // namespace

std::shared_ptr<std::byte[]> allocate_cache_page(size_t bytes) {
  if (!M3_PAGE_ARENA || bytes == 0 || bytes > kMaxArenaPageBytes) return allocator_page(bytes);
  const size_t rounded = (bytes + 63) / 64 * 64;
  std::byte* p = arena().take(rounded);
  std::memset(p, 0, rounded);
  return std::shared_ptr<std::byte[]>(p, [rounded](std::byte* q) { arena().give_back(q, rounded); });
}

}  // namespace m3
