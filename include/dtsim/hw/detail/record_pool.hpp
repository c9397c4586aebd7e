// Where the network's transfer records live (dtsim/hw/network.hpp): machinery, no API.
//
// Records are recycled once their transfer has ended and no handle holds them. They outlive
// the network while handles remain: a coroutine frame destroyed after the world's network
// may still hold one, so the pool is deleted with the last handle once the network is gone.
#pragma once

#include <cstddef>
#include <deque>
#include <vector>

namespace dtsim::hw::detail {

// Record: a struct with `refs` (the handles on it, and the network's slot until its end),
// `ended` and `dropped` (queued for recycling); TransferRecord.
template <class Record>
struct RecordPool {
    std::deque<Record> records;
    std::vector<Record*> free;
    std::vector<Record*> dropped;  // ended, last handle gone; checked on reuse
    std::size_t held = 0;          // records with refs > 0
    bool orphaned = false;         // the network is gone: delete with the last handle
    void release(Record* r) {
        if (--r->refs != 0) return;
        if (orphaned) {
            if (--held == 0) delete this;
            return;
        }
        --held;
        if (r->ended && !r->dropped) {
            r->dropped = true;
            dropped.push_back(r);
        }
    }
};

}  // namespace dtsim::hw::detail
