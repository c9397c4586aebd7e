// Where Task coroutine frames come from on the engine's fast path (task_frame.hpp).
#pragma once

#include <cstddef>

namespace dtsim::detail {

// Coroutine frames up to 4 KiB, by size class (64-byte steps): freed frames
// go to a free list, new ones are carved one after another from 2 MiB chunks
// (pages.hpp), and once every frame is back the pool starts carving from its
// first chunk again. Per thread, and the chunks are unmapped when the thread
// ends: a frame must be freed on the thread that allocated it, before that
// thread ends (dtsim runs a simulation on one thread). Larger frames come
// from operator new.
void* frame_allocate(std::size_t bytes);
void frame_deallocate(void* p, std::size_t bytes) noexcept;
// Frames from the calling thread's pool not yet freed (a frame kept alive
// keeps the pool from starting over).
std::size_t frames_live();

}  // namespace dtsim::detail
