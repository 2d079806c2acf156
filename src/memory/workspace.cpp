#include "memory/workspace.h"

#include <algorithm>
#include <cstdint>

namespace m3 {

void* Workspace::bytes_for(Buffer b, size_t bytes) {
  Block& blk = blocks_[size_t(b)];
  bytes = bytes == 0 ? 1 : bytes;
  if (blk.capacity < bytes) {
    // Grow by half again, so a slowly growing pass (decode at rising batch sizes) reallocates rarely.
    const size_t cap = std::max(bytes, blk.capacity + blk.capacity / 2);
    blk.data.reset();
    blk.data.reset(new std::byte[cap + 63]);
    blk.capacity = cap;
  }
  const uintptr_t p = reinterpret_cast<uintptr_t>(blk.data.get());
  return reinterpret_cast<void*>((p + 63) & ~uintptr_t(63));
}

size_t Workspace::bytes() const {
  size_t n = 0;
  for (const Block& b : blocks_) n += b.capacity;
  return n;
}

}  // namespace m3
