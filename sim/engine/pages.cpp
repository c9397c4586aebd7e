#include "dtsim/detail/pages.hpp"

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <new>

#if defined(__SANITIZE_ADDRESS__)
#define DTSIM_PAGES_ON_HEAP 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define DTSIM_PAGES_ON_HEAP 1
#endif
#endif
#if defined(__linux__) && !defined(DTSIM_PAGES_ON_HEAP)
#define DTSIM_PAGES_MAPPED 1
#include <sys/mman.h>
#endif

namespace dtsim::detail {

namespace {
std::size_t round_up(std::size_t n, std::size_t to) { return (n + to - 1) / to * to; }

#ifdef DTSIM_PAGES_MAPPED
// DTSIM_HUGE_PAGES=0 leaves the kernel's default (small pages where THP is
// "madvise"): on a machine whose memory is fragmented, a fault on a huge page
// may wait for the kernel to compact memory.
bool huge_pages_wanted() {
    static const bool wanted = [] {
        const char* v = std::getenv("DTSIM_HUGE_PAGES");
        return !(v && std::strcmp(v, "0") == 0);
    }();
    return wanted;
}

// Released blocks of a kind kept for the next allocation of that kind and
// size, up to a few of them and 1 GiB in all (beyond that, the oldest go back
// to the system). Made once and never destroyed: a block released while the
// process exits has somewhere to go.
class Recycled {
public:
    static constexpr std::size_t kSlots = 16;
    static constexpr std::size_t kMaxBytes = std::size_t{1} << 30;
    void* take(std::size_t size, const PageKind* kind) {
        std::lock_guard lock(mutex_);
        for (std::size_t i = 0; i < count_; ++i)
            if (slots_[i].size == size && slots_[i].kind == kind) {
                void* p = slots_[i].p;
                bytes_ -= size;
                remove(i);
                return p;
            }
        return nullptr;
    }
    // Keeps the block; returns false when it cannot (larger than all kept may be).
    bool keep(void* p, std::size_t size, const PageKind* kind) {
        if (size > kMaxBytes) return false;
        std::lock_guard lock(mutex_);
        while (count_ == kSlots || bytes_ + size > kMaxBytes) {
            ::munmap(slots_[0].p, slots_[0].size);
            bytes_ -= slots_[0].size;
            remove(0);
        }
        slots_[count_++] = {p, size, kind};
        bytes_ += size;
        return true;
    }
    void trim() {
        std::lock_guard lock(mutex_);
        for (std::size_t i = 0; i < count_; ++i) ::munmap(slots_[i].p, slots_[i].size);
        count_ = 0;
        bytes_ = 0;
    }
    static Recycled& instance() {
        static Recycled* const r = new Recycled();
        return *r;
    }

private:
    struct Slot {
        void* p;
        std::size_t size;
        const PageKind* kind;
    };
    void remove(std::size_t i) {
        for (std::size_t j = i + 1; j < count_; ++j) slots_[j - 1] = slots_[j];
        --count_;
    }
    std::mutex mutex_;
    Slot slots_[kSlots] = {};
    std::size_t count_ = 0;
    std::size_t bytes_ = 0;
};
#endif
}  // namespace

bool pages_mapped() {
#ifdef DTSIM_PAGES_MAPPED
    return true;
#else
    return false;
#endif
}

void* allocate_pages(std::size_t bytes, const PageKind* kind) {
    if (allocation_fails()) throw std::bad_alloc();
#ifdef DTSIM_PAGES_MAPPED
    if (bytes >= kMappedFrom) {
        const bool huge = bytes >= kHugePage;
        const std::size_t align = huge ? kHugePage : 4096;
        const std::size_t size = round_up(bytes, align);
        if (size < bytes || size + align < size) throw std::bad_alloc();
        if (kind)
            if (void* p = Recycled::instance().take(size, kind)) return p;
        if (!huge) {
            void* p = ::mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
            if (p == MAP_FAILED) throw std::bad_alloc();
            return p;
        }
        // Map a huge page more than needed, keep the aligned part, return the rest.
        void* raw = ::mmap(nullptr, size + kHugePage, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (raw == MAP_FAILED) throw std::bad_alloc();
        const auto start = reinterpret_cast<std::uintptr_t>(raw);
        const std::uintptr_t aligned = round_up(start, kHugePage);
        if (aligned > start) ::munmap(raw, aligned - start);
        const std::uintptr_t tail = aligned + size;
        if (const std::size_t after = start + size + kHugePage - tail; after > 0)
            ::munmap(reinterpret_cast<void*>(tail), after);
        void* p = reinterpret_cast<void*>(aligned);
        if (huge_pages_wanted()) ::madvise(p, size, MADV_HUGEPAGE);  // advice: failure (THP off) leaves small pages
        return p;
    }
#else
    (void)kind;
#endif
    const std::size_t size = round_up(bytes == 0 ? 1 : bytes, 64);
    if (size < bytes) throw std::bad_alloc();
    void* p = std::aligned_alloc(64, size);
    if (!p) throw std::bad_alloc();
    return std::memset(p, 0, size);
}

void release_pages(void* p, std::size_t bytes, const PageKind* kind) noexcept {
    if (!p) return;
#ifdef DTSIM_PAGES_MAPPED
    if (bytes >= kMappedFrom) {
        const std::size_t size = round_up(bytes, bytes >= kHugePage ? kHugePage : 4096);
        if (kind && Recycled::instance().keep(p, size, kind)) return;
        ::munmap(p, size);
        return;
    }
#else
    (void)bytes;
    (void)kind;
#endif
    std::free(p);
}

namespace {
thread_local long allocations_before_failure = -1;
}
void fail_allocation(long n) noexcept { allocations_before_failure = n < 0 ? -1 : n; }
bool allocation_fails() noexcept {
    if (allocations_before_failure < 0) return false;
    return allocations_before_failure-- == 0;
}

void* allocate_zeroed(std::size_t count, std::size_t size) noexcept {
    if (allocation_fails()) return nullptr;
    return std::calloc(count, size);
}

void trim_pages() noexcept {
#ifdef DTSIM_PAGES_MAPPED
    Recycled::instance().trim();
#endif
}

}  // namespace dtsim::detail
