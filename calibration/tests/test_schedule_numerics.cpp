// Runs the programs with real arithmetic on the CPU, the way gpu/puzzle_executor.cpp runs
// them on GPUs (same layer math, same buffer wiring, collectives and passes in lockstep),
// and checks that every strategy ends with the weights the basic strategy computes. This is
// what dtsim-puzzle-real's own check does on the GPUs; here it tests the programs' data
// flow (which buffer each operation reads, shard offsets, message sizes) without a GPU.
#include "host/schedule.hpp"

#include "dtsim/puzzle/registry.hpp"

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

using namespace dtsim::harness;

namespace {

using Vec = std::vector<float>;

float hash_uniform(std::uint64_t seed, std::int64_t index) {
    std::uint64_t x = seed * 0x9E3779B97F4A7C15ull + static_cast<std::uint64_t>(index) + 1;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    x ^= x >> 31;
    return static_cast<float>(x >> 40) * (2.0f / 16777216.0f) - 1.0f;
}

// Row-major C[m,n] = op(A)[m,k] op(B)[k,n].
void gemm(char ta, char tb, std::int64_t m, std::int64_t n, std::int64_t k, const float* a, const float* b, float* c) {
    for (std::int64_t i = 0; i < m; ++i)
        for (std::int64_t j = 0; j < n; ++j) {
            double sum = 0;
            for (std::int64_t p = 0; p < k; ++p) {
                const float av = ta == 'N' ? a[i * k + p] : a[p * m + i];
                const float bv = tb == 'N' ? b[p * n + j] : b[j * k + p];
                sum += static_cast<double>(av) * bv;
            }
            c[i * n + j] = static_cast<float>(sum);
        }
}

struct Final {
    std::int64_t offset = 0;
    Vec values;
};

class CpuRun {
public:
    CpuRun(const std::vector<RankProgram>& programs, const ModelDims& dims, float lr)
        : programs_(programs), dims_(dims), lr_(lr), bufs_(programs.size()), pos_(programs.size(), 0) {
        for (std::size_t r = 0; r < programs.size(); ++r) bufs_[r].resize(programs[r].buffers.size());
    }

    // Final weights by layer: (offset, values) pieces from every rank.
    std::map<int, std::vector<Final>> run() {
        const std::size_t n = programs_.size();
        for (bool progress = true; progress;) {
            progress = false;
            for (std::size_t r = 0; r < n; ++r)
                while (at(r) != nullptr && !is_communication(at(r)->op)) {
                    local(r, *at(r));
                    ++pos_[r];
                    progress = true;
                }
            for (std::size_t r = 0; r < n; ++r) {
                const Instr* s = at(r);
                if (s == nullptr || s->op != Op::send) continue;
                const auto dst = static_cast<std::size_t>(s->peer);
                const Instr* t = at(dst);
                if (t != nullptr && t->op == Op::recv && t->peer == static_cast<int>(r)) {
                    buf(dst, t->outs.at(0)) = buf(r, s->ins.at(0));
                    ++pos_[r];
                    ++pos_[dst];
                    progress = true;
                }
            }
            bool all = true;
            for (std::size_t r = 0; r < n; ++r) all = all && at(r) != nullptr && is_collective(at(r)->op);
            if (all) {
                collective();
                for (std::size_t r = 0; r < n; ++r) ++pos_[r];
                progress = true;
            }
        }
        for (std::size_t r = 0; r < n; ++r) REQUIRE(at(r) == nullptr);
        return finals_;
    }

private:
    const Instr* at(std::size_t r) const {
        return pos_[r] < programs_[r].instrs.size() ? &programs_[r].instrs[pos_[r]] : nullptr;
    }
    Vec& buf(std::size_t r, int id) { return bufs_[r].at(static_cast<std::size_t>(id)); }
    std::int64_t elems(std::size_t r, int id) const {
        return programs_[r].buffers.at(static_cast<std::size_t>(id)).elems;
    }

    void local(std::size_t r, const Instr& in) {
        for (int id : in.outs) buf(r, id).assign(static_cast<std::size_t>(elems(r, id)), 0.0f);
        const std::int64_t h = dims_.hidden;
        const std::int64_t hh = dims_.weight_elems();
        switch (in.op) {
            case Op::load_weights: {
                Vec& w = buf(r, in.outs[0]);
                const auto n = static_cast<std::int64_t>(w.size());
                const float scale = std::sqrt(6.0f / static_cast<float>(h));
                for (std::int64_t i = 0; i < n; ++i) {
                    const std::int64_t g = in.shard * n + i;
                    w[static_cast<std::size_t>(i)] = g < hh ? scale * hash_uniform(100 + static_cast<std::uint64_t>(in.layer), g) : 0.0f;
                }
                break;
            }
            case Op::get_activation: {
                Vec& a = buf(r, in.outs[0]);
                const std::int64_t per = dims_.batch_elems();
                for (std::size_t j = 0; j < in.batches.size(); ++j)
                    for (std::int64_t i = 0; i < per; ++i)
                        a[j * static_cast<std::size_t>(per) + static_cast<std::size_t>(i)] =
                            hash_uniform(900 + static_cast<std::uint64_t>(in.batches[j]), i);
                break;
            }
            case Op::fake_grad: break;  // zeros
            case Op::forward: {
                const std::int64_t rows = static_cast<std::int64_t>(in.batches.size()) * dims_.tokens;
                Vec& y = buf(r, in.outs[0]);
                gemm('N', 'N', rows, h, h, buf(r, in.ins[0]).data(), buf(r, in.ins[1]).data(), y.data());
                for (float& v : y) v = v > 0 ? v : 0;
                break;
            }
            case Op::loss: {
                const Vec& y = buf(r, in.ins[0]);
                Vec& g = buf(r, in.outs[0]);
                const float a = 1.0f / static_cast<float>(dims_.batches * dims_.tokens);
                for (std::size_t i = 0; i < y.size(); ++i) g[i] = a * y[i];
                break;
            }
            case Op::backward: {
                const std::int64_t rows = static_cast<std::int64_t>(in.batches.size()) * dims_.tokens;
                const Vec& x = buf(r, in.ins[0]);
                const Vec& dy = buf(r, in.ins[1]);
                const Vec& w = buf(r, in.ins[2]);
                Vec z(static_cast<std::size_t>(rows * h));
                gemm('N', 'N', rows, h, h, x.data(), w.data(), z.data());
                for (std::size_t i = 0; i < z.size(); ++i) z[i] = z[i] > 0 ? dy[i] : 0.0f;
                gemm('N', 'T', rows, h, h, z.data(), w.data(), buf(r, in.outs[1]).data());
                gemm('T', 'N', h, h, rows, x.data(), z.data(), buf(r, in.outs[0]).data());
                break;
            }
            case Op::update: {
                const Vec& g = buf(r, in.ins[0]);
                Vec& w = buf(r, in.ins[1]);
                Vec& o = buf(r, in.ins[2]);
                const std::size_t n = w.size();
                REQUIRE(static_cast<std::size_t>(in.grad_offset) + n <= g.size());
                REQUIRE(o.size() == 2 * n);
                for (std::size_t i = 0; i < n; ++i) {
                    const float gi = g[static_cast<std::size_t>(in.grad_offset) + i];
                    const float m = 0.1f * gi, v = 0.001f * gi * gi;  // Adam step 1 from zero moments
                    o[i] = m;
                    o[n + i] = v;
                    w[i] -= lr_ * (m / 0.1f) / (std::sqrt(v / 0.001f) + 1e-8f);
                }
                break;
            }
            case Op::accumulate: {
                Vec& a = buf(r, in.ins[0]);
                const Vec& b = buf(r, in.ins[1]);
                REQUIRE(a.size() == b.size());
                for (std::size_t i = 0; i < a.size(); ++i) a[i] += b[i];
                break;
            }
            case Op::release: buf(r, in.ins[0]) = Vec(); break;
            case Op::set_final: {
                const Vec& w = buf(r, in.ins[0]);
                const auto n = static_cast<std::int64_t>(w.size());
                const std::int64_t offset = in.shard * n;
                const std::int64_t count = std::clamp<std::int64_t>(hh - offset, 0, n);
                finals_[in.layer].push_back(Final{offset, Vec(w.begin(), w.begin() + count)});
                break;
            }
            default: FAIL("not a local operation: " << op_name(in.op));
        }
    }

    void collective() {
        const std::size_t n = programs_.size();
        const Instr& first = *at(0);
        if (first.op == Op::allreduce) {
            Vec sum(buf(0, first.ins[0]).size(), 0.0f);
            for (std::size_t r = 0; r < n; ++r) {
                const Vec& v = buf(r, at(r)->ins[0]);
                REQUIRE(v.size() == sum.size());
                for (std::size_t i = 0; i < v.size(); ++i) sum[i] += v[i];
            }
            for (std::size_t r = 0; r < n; ++r) buf(r, at(r)->ins[0]) = sum;
        } else if (first.op == Op::allgather) {
            Vec all;
            for (std::size_t r = 0; r < n; ++r) {
                const Vec& v = buf(r, at(r)->ins[0]);
                all.insert(all.end(), v.begin(), v.end());
            }
            for (std::size_t r = 0; r < n; ++r) {
                Vec& out = buf(r, at(r)->outs[0]);
                out.assign(static_cast<std::size_t>(elems(r, at(r)->outs[0])), 0.0f);
                REQUIRE(out.size() == all.size());
                out = all;
            }
        } else {
            REQUIRE(first.op == Op::scatterreduce);
            Vec sum(buf(0, first.ins[0]).size(), 0.0f);
            for (std::size_t r = 0; r < n; ++r) {
                const Vec& v = buf(r, at(r)->ins[0]);
                REQUIRE(v.size() == sum.size());
                for (std::size_t i = 0; i < v.size(); ++i) sum[i] += v[i];
            }
            for (std::size_t r = 0; r < n; ++r) {
                const auto len = static_cast<std::size_t>(elems(r, at(r)->outs[0]));
                REQUIRE(len * n == sum.size());
                buf(r, at(r)->outs[0]).assign(sum.begin() + static_cast<std::ptrdiff_t>(r * len),
                                              sum.begin() + static_cast<std::ptrdiff_t>((r + 1) * len));
            }
        }
    }

    const std::vector<RankProgram>& programs_;
    ModelDims dims_;
    float lr_;
    std::vector<std::vector<Vec>> bufs_;
    std::vector<std::size_t> pos_;
    std::map<int, std::vector<Final>> finals_;
};

// The final weights of every layer, assembled from the pieces; every element set once.
std::map<int, Vec> assemble(const std::map<int, std::vector<Final>>& finals, const ModelDims& dims) {
    std::map<int, Vec> out;
    for (const auto& [layer, pieces] : finals) {
        Vec w(static_cast<std::size_t>(dims.weight_elems()), NAN);
        for (const auto& p : pieces)
            for (std::size_t i = 0; i < p.values.size(); ++i) {
                float& dst = w[static_cast<std::size_t>(p.offset) + i];
                // Replicated ranks (ddp) must agree exactly: they ran the same all-reduce result.
                if (!std::isnan(dst)) CHECK(dst == p.values[i]);
                dst = p.values[i];
            }
        out[layer] = w;
    }
    return out;
}

}  // namespace

TEST_CASE("every strategy's programs, run with real arithmetic, end with the basic strategy's weights") {
    const float lr = 1e-2f;
    struct Case {
        std::string puzzle;
        int layers, batches, ranks;
    };
    std::vector<Case> cases;
    for (const auto& info : dtsim::puzzle::puzzles()) cases.push_back({info.name, info.layers, info.batches, info.ranks});
    const std::vector<Case> more = {
        {"grad_accum", 3, 5, 1}, {"ddp", 3, 6, 6},     {"wsdp", 4, 3, 3},           {"fsdp", 3, 7, 7},
        {"pipeline", 6, 3, 3},   {"gpipe", 6, 5, 3},   {"gpipe", 8, 3, 8},          {"pipeline_fsdp", 8, 4, 16},
    };
    cases.insert(cases.end(), more.begin(), more.end());
    for (const auto& c : cases) {
        CAPTURE(c.puzzle);
        CAPTURE(c.layers);
        CAPTURE(c.batches);
        CAPTURE(c.ranks);
        ModelDims dims;
        dims.layers = c.layers;
        dims.batches = c.batches;
        dims.ranks = c.ranks;
        dims.hidden = 10;  // small, and 100 elements do not split evenly over 3, 7 or 16 ranks: padding is exercised
        dims.tokens = 6;
        ModelDims ref_dims = dims;
        ref_dims.ranks = 1;
        const auto reference = assemble(CpuRun(build_programs("basic", ref_dims), ref_dims, lr).run(), ref_dims);
        const auto got = assemble(CpuRun(build_programs(c.puzzle, dims), dims, lr).run(), dims);
        REQUIRE(got.size() == static_cast<std::size_t>(dims.layers));
        int moved = 0, compared = 0;
        for (const auto& [layer, w] : got) {
            const Vec& ref = reference.at(layer);
            for (std::size_t i = 0; i < w.size(); ++i) {
                REQUIRE_FALSE(std::isnan(w[i]));  // every element set by some rank
                CHECK(std::fabs(w[i] - ref[i]) <= lr / 4);
                ++compared;
            }
            // The update really happened: weights moved by about lr (Adam's first step).
            const Vec init = [&] {
                Vec v(w.size());
                const float scale = std::sqrt(6.0f / static_cast<float>(dims.hidden));
                for (std::size_t i = 0; i < v.size(); ++i)
                    v[i] = scale * hash_uniform(100 + static_cast<std::uint64_t>(layer), static_cast<std::int64_t>(i));
                return v;
            }();
            for (std::size_t i = 0; i < w.size(); ++i)
                if (std::fabs(std::fabs(w[i] - init[i]) - lr) < lr / 100) ++moved;
        }
        CHECK(moved > compared / 4);
    }
}
