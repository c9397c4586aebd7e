// Zeroed memory for a run's large per-rank arrays (store arenas, models,
// GPUs, coroutine frames), tens of megabytes at thousands of ranks. On Linux,
// arrays of 2 MiB or more are mapped on 2 MiB boundaries and the kernel is
// asked for transparent huge pages (madvise; a no-op where THP is off;
// DTSIM_HUGE_PAGES=0 in the environment does not ask): a run's first touch of
// its memory takes one page fault per 2 MiB instead of one per 4 KiB
// (docs/performance.md).
// Arrays from 128 KiB are mapped too, on small pages: the kernel zeroes their
// pages when first touched, so room never used costs nothing. Blocks released
// with a kind are kept for the next run of the process (below).
#pragma once

#include <cstddef>

namespace dtsim::detail {

// A kind of block whose owner leaves it in a state its next owner can start
// from (a store arena whose entries are all empty again, an array that its
// next owner constructs anew): identified by the object's address.
struct PageKind {
    const char* name;
};

// `bytes` of memory aligned to 64 (to 4 KiB when mapped, to 2 MiB when
// `bytes` is 2 MiB or more); throws std::bad_alloc. Without a kind it is
// zeroed. With a kind it is zeroed or, for a mapped block, a block of the
// same size and kind released before, as its owner left it: the next run of a
// process that runs several (the bench, a comparison of schedules) takes it
// back without the kernel clearing tens of megabytes again. Released with
// release_pages(p, bytes, kind) with the same kind.
void* allocate_pages(std::size_t bytes, const PageKind* kind = nullptr);
void release_pages(void* p, std::size_t bytes, const PageKind* kind = nullptr) noexcept;

// count zeroed bytes from the heap (calloc) or nullptr; the stores' tables and
// counts. Out of line, so that the fault injection below adds nothing to the
// code that inlines a store's insert.
void* allocate_zeroed(std::size_t count, std::size_t size) noexcept;

// Gives the blocks kept for reuse back to the system (tests; a long-lived process).
void trim_pages() noexcept;

// Whether blocks from kMappedFrom bytes up are mapped (and those released with
// a kind kept): on Linux, except in an AddressSanitizer build, where every
// block comes from the heap so that the sanitizer sees each use after release.
bool pages_mapped();

// Fault injection, for tests of what a failed allocation leaves behind: on the
// calling thread, the allocation n allocations from now (0: the next one) of
// allocate_pages and of allocate_zeroed fails (std::bad_alloc, nullptr),
// once; a negative n turns it off.
void fail_allocation(long n) noexcept;
// Counts one allocation of those; true for the one that is to fail.
bool allocation_fails() noexcept;

inline constexpr std::size_t kMappedFrom = std::size_t{128} << 10;
inline constexpr std::size_t kHugePage = std::size_t{2} << 20;

}  // namespace dtsim::detail
