#pragma once
// Zeroed cache pages. Small pages (a small model's block: the tiny preset's is 4 KiB) are carved
// from 2 MiB chunks that the kernel is asked to back with huge pages (madvise MADV_HUGEPAGE), so
// that a row attending to scattered blocks does not miss the TLB on every one of them
// (docs/BENCHMARKS.md §0t). A freed small page goes back to a free list of its size and is reused
// by the next cache; its chunk stays with the process, as glibc's heap keeps such pages today.
// Larger pages (M3's: 256 KiB and more) come from the C++ allocator as before. Under
// AddressSanitizer every page comes from the allocator, so that ASan keeps a red zone around each.
// Thread-safe.
#include <cstddef>
#include <memory>

namespace m3 {

// A zeroed page of `bytes`, 64-byte aligned; it returns to its free list when the last owner drops it.
std::shared_ptr<std::byte[]> allocate_cache_page(size_t bytes);

// The largest page carved from huge-page chunks; larger ones come from the allocator.
constexpr size_t kMaxArenaPageBytes = 64 * 1024;

}  // namespace m3
