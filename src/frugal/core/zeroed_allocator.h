// An allocator for large buffers that must read as zero but should not cost resident memory until
// they are written. std::vector<T>::resize value-initialises (memsets) every element, which
// touches every page of, say, a KV cache reserved for the whole context at once. With this
// allocator large blocks are fresh anonymous mappings (already zero, not resident until touched,
// and starting on a system page, so whole pages of them can be given back: discard_resident),
// small ones come from calloc, and resize() leaves the elements as they were made.
#pragma once

#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <new>
#include <type_traits>

namespace frugal {

template <typename T>
struct ZeroedAllocator {
  static_assert(std::is_trivially_default_constructible_v<T> && std::is_trivially_destructible_v<T>,
                "ZeroedAllocator is for plain data only");
  using value_type = T;

  ZeroedAllocator() = default;
  template <typename U>
  ZeroedAllocator(const ZeroedAllocator<U>&) noexcept {}  // NOLINT: rebinding must be implicit

  // Blocks from this size on are mappings of their own (munmap returns them to the system at once,
  // where the heap would keep freed blocks resident).
  static constexpr size_t kMapBytes = size_t{1} << 16;

  T* allocate(size_t n) {
    if (n > SIZE_MAX / sizeof(T)) throw std::bad_alloc();
    const size_t bytes = (n == 0 ? 1 : n) * sizeof(T);
    if (bytes >= kMapBytes) {
      void* p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
      if (p == MAP_FAILED) throw std::bad_alloc();
      return static_cast<T*>(p);
    }
    void* p = std::calloc(n == 0 ? 1 : n, sizeof(T));
    if (p == nullptr) throw std::bad_alloc();
    return static_cast<T*>(p);
  }
  void deallocate(T* p, size_t n) noexcept {
    const size_t bytes = (n == 0 ? 1 : n) * sizeof(T);
    if (bytes >= kMapBytes) {
      ::munmap(p, bytes);
    } else {
      std::free(p);
    }
  }

  // resize() without a value: leave the calloc'd zeros untouched.
  template <typename U>
  void construct(U*) noexcept {}
  template <typename U, typename... Args>
  void construct(U* p, Args&&... args) {
    ::new (static_cast<void*>(p)) U(static_cast<Args&&>(args)...);
  }

  template <typename U>
  bool operator==(const ZeroedAllocator<U>&) const noexcept {
    return true;
  }
};

// Gives the system pages lying wholly inside [p, p + bytes) back to the system: they stop counting
// as resident and read as zero when next touched. For storage whose content no longer matters
// (a ZeroedAllocator block, or any heap block the caller owns). Returns the bytes given back.
inline size_t discard_resident(void* p, size_t bytes) noexcept {
  static const size_t page = static_cast<size_t>(::sysconf(_SC_PAGESIZE));
  const auto begin = reinterpret_cast<uintptr_t>(p);
  const uintptr_t first = (begin + page - 1) / page * page;
  const uintptr_t last = (begin + bytes) / page * page;
  if (last <= first) return 0;
  if (::madvise(reinterpret_cast<void*>(first), last - first, MADV_DONTNEED) != 0) return 0;
  return last - first;
}

}  // namespace frugal
