// RankThinner: a trace read only to be drawn keeps whole only the ranks the picture draws.
#include "dtsim/render.hpp"

#include "layout.hpp"
#include "memory_profile.hpp"
#include "pipeline.hpp"

#include <algorithm>
#include <cmath>
#include <optional>
#include <stdexcept>
#include <utility>

namespace dtsim::render {
namespace {

// The events that set what a rank not drawn contributes (see RankThinner), in their order; nothing
// where one of them cannot be drawn (the rank stays whole, for the picture to name it).
std::optional<std::vector<Event>> telling_events(const RankTrace& r) {
    const auto& ev = r.events;
    if (ev.empty()) return std::vector<Event>{};
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
    std::sort(keep.begin(), keep.end());
    keep.erase(std::unique(keep.begin(), keep.end()), keep.end());
    std::vector<Event> out;
    out.reserve(keep.size());
    for (auto i : keep) out.push_back(ev[i]);
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
    if (options_.ranks.empty()) {
        // The pipeline view's rows: the first GPU of each stage. Without stages, or with more of them
        // than rows (the overview, every rank drawn), every rank is drawn.
        if (options_.view == View::ranks || g.pp < 2) return;
        if (options_.view == View::automatic && g.pp > options_.max_rows) return;
        wanted_ = detail::pipeline_view_ranks(g);
    } else {
        try {
            wanted_ = parse_rank_selection(options_.ranks, g, g.size());
        } catch (const std::invalid_argument&) {
            return;  // the picture says what is wrong with the selection, on the whole trace
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
    if (plan_ != Plan::select || std::binary_search(wanted_.begin(), wanted_.end(), rank.rank)) return;
    auto events = telling_events(rank);
    if (!events) return;
    auto sample = telling_sample(so_far, rank);
    if (!sample) return;
    rank.events = std::move(*events);
    rank.memory_by_kind = std::move(*sample);
    kept_[index] = 0;
}

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
