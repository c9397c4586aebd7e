#include "dtsim/pages.hpp"

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <new>

#if defined(__linux__)
#include <sys/mman.h>
#endif

namespace dtsim {

namespace {
std::size_t round_up(std::size_t n, std::size_t to) { return (n + to - 1) / to * to; }
}  // namespace

void* allocate_pages(std::size_t bytes) {
#if defined(__linux__)
    if (bytes >= kHugePage) {
        // Map a huge page more than needed, keep the aligned part, return the rest.
        const std::size_t size = round_up(bytes, kHugePage);
        if (size < bytes || size + kHugePage < size) throw std::bad_alloc();
        void* raw = ::mmap(nullptr, size + kHugePage, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (raw == MAP_FAILED) throw std::bad_alloc();
        const auto start = reinterpret_cast<std::uintptr_t>(raw);
        const std::uintptr_t aligned = round_up(start, kHugePage);
        if (aligned > start) ::munmap(raw, aligned - start);
        const std::uintptr_t tail = aligned + size;
        if (const std::size_t after = start + size + kHugePage - tail; after > 0)
            ::munmap(reinterpret_cast<void*>(tail), after);
        void* p = reinterpret_cast<void*>(aligned);
        ::madvise(p, size, MADV_HUGEPAGE);  // advice: failure (THP off) leaves small pages
        return p;
    }
#endif
    const std::size_t size = round_up(bytes == 0 ? 1 : bytes, 64);
    if (size < bytes) throw std::bad_alloc();
    void* p = std::aligned_alloc(64, size);
    if (!p) throw std::bad_alloc();
    return std::memset(p, 0, size);
}

void release_pages(void* p, std::size_t bytes) noexcept {
    if (!p) return;
#if defined(__linux__)
    if (bytes >= kHugePage) {
        ::munmap(p, round_up(bytes, kHugePage));
        return;
    }
#endif
    std::free(p);
}

}  // namespace dtsim
