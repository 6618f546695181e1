// An allocator for large buffers that must read as zero but should not cost resident memory until
// they are written. std::vector<T>::resize value-initialises (memsets) every element, which
// touches every page of, say, a KV cache reserved for the whole context at once. With this
// allocator the storage comes from calloc (whose large blocks are fresh mmap'd pages, already
// zero and not resident until touched) and resize() leaves the elements as calloc made them.
#pragma once

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

  T* allocate(size_t n) {
    void* p = std::calloc(n == 0 ? 1 : n, sizeof(T));
    if (p == nullptr) throw std::bad_alloc();
    return static_cast<T*>(p);
  }
  void deallocate(T* p, size_t) noexcept { std::free(p); }

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

}  // namespace frugal
