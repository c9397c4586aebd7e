// RankThinner: a trace read only to be drawn keeps whole only the ranks the picture draws.
#include "dtsim/render.hpp"

#include "layout.hpp"
#include "memory_profile.hpp"
#include "pipeline.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <optional>
#include <stdexcept>
#include <utility>
#include <vector>

namespace dtsim::render {
namespace {

// The events that set what a rank not drawn contributes (see RankThinner), by index, in their
// order; nothing where one of them cannot be drawn (the rank stays whole, for the picture to name it).
std::optional<std::vector<std::size_t>> telling_events(const RankTrace& r) {
    const auto& ev = r.events;
    if (ev.empty()) return std::vector<std::size_t>{};
    std::size_t first = 0, last_end = 0, most = 0, pass = ev.size();
    for (std::size_t i = 0; i < ev.size(); ++i) {
        if (!detail::drawable(ev[i])) return std::nullopt;
        if (ev[i].start < ev[first].start) first = i;
        if (ev[i].end() > ev[last_end].end()) last_end = i;
        if (ev[i].memory > ev[most].memory) most = i;
        if (pass == ev.size() && !ev[i].batches.empty() && detail::pass_kind(ev[i].op) != detail::PassKind::other)
            pass = i;
    }
    std::vector<std::size_t> keep{first, last_end, most, ev.size() - 1};
    if (pass < ev.size()) keep.push_back(pass);
    return keep;
}

// What the overview's census reads of a rank too (take_census in layout.cpp), by index: the first
// event of each kind and name, the first instant (a marker) and the first that is not the loss, the
// first on the comm stream, and the first with the highest layer of the kinds coloured by layer.
std::vector<std::size_t> census_events(const RankTrace& r) {
    const auto& ev = r.events;
    std::vector<std::size_t> keep;
    std::vector<std::uint32_t> named;  // kind and operation (an interned name: the same id, the same name)
    const std::size_t none = ev.size();
    std::size_t marker = none, not_loss = none, comm = none, top = none;
    for (std::size_t i = 0; i < ev.size(); ++i) {
        const Event& e = ev[i];
        const detail::BoxClass cls = detail::box_class(e);
        using enum detail::BoxClass;
        if ((cls == forward || cls == backward || cls == collective) &&
            (top == none || e.layer > ev[top].layer))
            top = i;
        if (comm == none && e.stream == Stream::comm) comm = i;
        if (e.duration == 0) {
            if (marker == none) marker = i;
            if (not_loss == none && e.op != ops::loss) not_loss = i;
            continue;
        }
        const std::uint32_t key = static_cast<std::uint32_t>(cls) << 16 | e.op.id();
        if (std::find(named.begin(), named.end(), key) == named.end()) {
            named.push_back(key);
            keep.push_back(i);
        }
    }
    for (std::size_t i : {marker, not_loss, comm, top})
        if (i < none) keep.push_back(i);
    return keep;
}

// The rank's events at `keep`, in their order.
std::vector<Event> picked(const RankTrace& r, std::vector<std::size_t> keep) {
    std::sort(keep.begin(), keep.end());
    keep.erase(std::unique(keep.begin(), keep.end()), keep.end());
    std::vector<Event> out;
    out.reserve(keep.size());
    for (auto i : keep) out.push_back(r.events[i]);
    return out;
}

// The largest sample of memory by kind alone (largest_kind_sample's), or nothing where the samples
// cannot be read yet (the kinds come after the ranks) or one cannot be drawn.
std::optional<std::vector<double>> telling_sample(const Trace& so_far, const RankTrace& r) {
    if (r.memory_by_kind.empty()) return std::vector<double>{};
    if (so_far.memory_kinds.empty() || !so_far.whole_memory_samples(r)) return std::nullopt;
    for (std::size_t i = 0, n = so_far.memory_samples(r); i < n; ++i)
        if (!detail::drawable(so_far, detail::kind_sample(so_far, r, i))) return std::nullopt;
    const auto best = detail::largest_kind_sample(so_far, r);
    if (!best) return std::vector<double>{};
    const std::size_t width = 1 + so_far.memory_kinds.size();
    const auto from = r.memory_by_kind.begin() + static_cast<std::ptrdiff_t>(*best * width);
    return std::vector<double>(from, from + static_cast<std::ptrdiff_t>(width));
}

}  // namespace

RankThinner::RankThinner(Options options) : options_(std::move(options)) {}

void RankThinner::decide(const Trace& so_far) {
    plan_ = Plan::keep_all;
    const RankGrid g = detail::meta_grid(so_far.meta);
    if (!g.known) return;
    const auto rows = static_cast<std::size_t>(std::max(options_.max_rows, 1));
    if (options_.ranks.empty()) {
        // The pipeline view's rows: the first GPU of each stage. Without stages, or with more of them
        // than rows, every rank is drawn: in the overview where they are more than its rows.
        const bool stages = options_.view == View::pipeline ||
                            (options_.view == View::automatic && g.pp >= 2 && g.pp <= options_.max_rows);
        if (!stages) {
            if (static_cast<std::size_t>(g.size()) > rows) plan_ = Plan::overview;
            return;
        }
        wanted_ = detail::pipeline_view_ranks(g);
    } else {
        try {
            wanted_ = parse_rank_selection(options_.ranks, g, g.size());
        } catch (const std::invalid_argument&) {
            return;  // the picture says what is wrong with the selection, on the whole trace
        }
        if (options_.view != View::pipeline && wanted_.size() > rows) {
            plan_ = Plan::overview;  // (a pipeline view of these ranks is decided on the whole trace)
            return;
        }
    }
    std::sort(wanted_.begin(), wanted_.end());
    plan_ = Plan::select;
}

void RankThinner::operator()(const Trace& so_far, RankTrace& rank) {
    const std::size_t index = so_far.ranks.empty() ? 0 : so_far.ranks.size() - 1;
    if (index == 0) {  // the first rank: a reader that starts again reads every rank again
        plan_ = Plan::undecided;
        wanted_.clear();
        kept_.clear();
    }
    if (plan_ == Plan::undecided) decide(so_far);
    if (kept_.size() <= index) kept_.resize(index + 1, 1);
    if (plan_ == Plan::keep_all ||
        (plan_ == Plan::select && std::binary_search(wanted_.begin(), wanted_.end(), rank.rank)))
        return;
    auto events = telling_events(rank);
    if (!events) return;
    auto sample = telling_sample(so_far, rank);
    if (!sample) return;
    if (plan_ == Plan::overview) {
        const auto more = census_events(rank);
        events->insert(events->end(), more.begin(), more.end());
    }
    rank.events = picked(rank, std::move(*events));
    rank.memory_by_kind = std::move(*sample);
    kept_[index] = 0;
}

bool RankThinner::overview() const { return plan_ == Plan::overview && thinned() > 0; }

std::size_t RankThinner::thinned() const {
    return static_cast<std::size_t>(std::count(kept_.begin(), kept_.end(), 0));
}

bool RankThinner::complete(const Trace& trace) const {
    if (thinned() == 0) return true;
    try {
        const detail::DrawnRanks drawn = detail::drawn_ranks(trace, options_, grid_of(trace));
        return std::all_of(drawn.ranks.begin(), drawn.ranks.end(),
                           [&](std::size_t i) { return i < kept_.size() && kept_[i]; });
    } catch (const std::invalid_argument&) {
        return false;  // a bad selection: the whole trace's picture says so
    }
}

}  // namespace dtsim::render
