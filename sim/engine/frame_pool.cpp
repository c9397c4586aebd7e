// The pool Task coroutine frames come from (detail/frame_pool.hpp).
#include "dtsim/detail/frame_pool.hpp"

#include "dtsim/detail/pages.hpp"

#include <algorithm>
#include <iterator>
#include <new>
#include <vector>

namespace dtsim {

namespace detail {
namespace {
constexpr std::size_t kFrameStep = 64;
constexpr std::size_t kFrameClasses = 64;  // frames up to 4 KiB are pooled
struct FreeFrame {
    FreeFrame* next;
};
// New frames are carved from chunks in allocation order, 64-byte aligned and
// without a malloc header between them: the frames of ranks spawned one after
// another lie side by side, and a sweep over the ranks reads them as a stream.
// A freed frame is reused by the next frame of its size (last freed, first
// reused). When no frame is left the pool starts over, carving from its first
// chunk again: the next run's frames then lie in rank order as the first run's
// did, not in the order the last run's ranks finished, and several runs in one
// process (a comparison, a benchmark) run at the same speed.
constexpr std::size_t kFrameChunk = kHugePage;  // on a huge page of its own (pages.hpp)
struct FramePool {
    FreeFrame* free[kFrameClasses] = {};
    char* next = nullptr;  // the unused rest of the chunk in use
    std::size_t left = 0;
    std::size_t live = 0;         // frames handed out and not given back
    std::vector<void*> chunks;    // all chunks, in the order they are carved
    std::size_t used_chunks = 0;  // chunks[0..used_chunks-1] have been carved from since the last start over
    void* carve(std::size_t bytes) {
        if (bytes > left) {
            if (used_chunks == chunks.size()) {
                // Room first, so that push_back cannot throw and leak the chunk.
                if (chunks.size() == chunks.capacity()) chunks.reserve(2 * chunks.size() + 1);
                chunks.push_back(allocate_pages(kFrameChunk));
            }
            next = static_cast<char*>(chunks[used_chunks++]);
            left = kFrameChunk;
        }
        void* p = next;
        next += bytes;
        left -= bytes;
        return p;
    }
    void start_over() {
        std::fill(std::begin(free), std::end(free), nullptr);
        next = nullptr;
        left = 0;
        used_chunks = 0;
    }
    FramePool() = default;
    FramePool(const FramePool&) = delete;
    FramePool& operator=(const FramePool&) = delete;
    ~FramePool() {
        for (void* c : chunks) release_pages(c, kFrameChunk);
    }
};
thread_local FramePool frame_pool;
}  // namespace

void* frame_allocate(std::size_t bytes) {
    const std::size_t c = (bytes + kFrameStep - 1) / kFrameStep;
    if (c >= kFrameClasses) return ::operator new(bytes);
    FramePool& pool = frame_pool;
    void* p;
    if (FreeFrame* f = pool.free[c]) {
        pool.free[c] = f->next;
        p = f;
    } else {
        p = pool.carve(c * kFrameStep);
    }
    ++pool.live;
    return p;
}

std::size_t frames_live() { return frame_pool.live; }

void frame_deallocate(void* p, std::size_t bytes) noexcept {
    const std::size_t c = (bytes + kFrameStep - 1) / kFrameStep;
    if (c >= kFrameClasses) {
        ::operator delete(p);
        return;
    }
    FramePool& pool = frame_pool;
    if (--pool.live == 0) {
        pool.start_over();
        return;
    }
    auto* f = static_cast<FreeFrame*>(p);
    f->next = pool.free[c];
    pool.free[c] = f;
}
}  // namespace detail

}  // namespace dtsim
