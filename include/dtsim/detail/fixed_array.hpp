// A fixed-capacity array of objects that cannot move (a simulation's GPUs, a
// run's models), constructed in place one after another in one allocation:
// element i+1 follows element i in memory, so a sweep over the ranks reads
// them as one forward stream instead of one heap block per rank (and, at
// thousands of ranks, on huge pages: see pages.hpp).
#pragma once

#include "dtsim/detail/pages.hpp"

#include <cstddef>
#include <new>
#include <stdexcept>
#include <utility>

namespace dtsim::detail {

template <class T>
class FixedArray {
public:
    FixedArray() = default;
    explicit FixedArray(std::size_t capacity)
        : data_(static_cast<T*>(allocate_pages(bytes(capacity), &kUnused))), capacity_(capacity) {}
    FixedArray(const FixedArray&) = delete;
    FixedArray& operator=(const FixedArray&) = delete;
    ~FixedArray() {
        while (size_ > 0) data_[--size_].~T();
        release_pages(data_, bytes(capacity_), &kUnused);
    }

    template <class... A>
    T& emplace_back(A&&... args) {
        if (size_ == capacity_) throw std::logic_error("FixedArray: capacity exceeded");
        T* p = new (data_ + size_) T(std::forward<A>(args)...);
        ++size_;
        return *p;
    }

    [[nodiscard]] std::size_t size() const { return size_; }
    T& operator[](std::size_t i) { return data_[i]; }
    const T& operator[](std::size_t i) const { return data_[i]; }
    T& at(std::size_t i) {
        if (i >= size_) throw std::out_of_range("FixedArray::at");
        return data_[i];
    }
    T* begin() { return data_; }
    T* end() { return data_ + size_; }
    const T* begin() const { return data_; }
    const T* end() const { return data_ + size_; }

private:
    static_assert(alignof(T) <= 64, "allocate_pages aligns to 64");
    // Memory no element lives in (the array constructs its elements in place, reading nothing there).
    static constexpr PageKind kUnused{"fixed array"};
    static std::size_t bytes(std::size_t n) {
        if (n > static_cast<std::size_t>(-1) / sizeof(T)) throw std::bad_alloc();
        return n * sizeof(T);
    }
    T* data_ = nullptr;
    std::size_t size_ = 0;
    std::size_t capacity_ = 0;
};

}  // namespace dtsim::detail
