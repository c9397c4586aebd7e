#include "host/puzzle_model.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>

namespace dtsim::calib::puzzle {

namespace detail {
BufferRef::~BufferRef() {
    if (owner != nullptr) owner->release_buffer(id);
}
}  // namespace detail

namespace {

std::vector<int> sorted_union(const std::vector<int>& a, const std::vector<int>& b) {
    std::vector<int> out;
    std::set_union(a.begin(), a.end(), b.begin(), b.end(), std::back_inserter(out));
    return out;
}

bool includes(const std::vector<int>& outer, const std::vector<int>& inner) {
    return std::includes(outer.begin(), outer.end(), inner.begin(), inner.end());
}

std::string kind_text(BufferKind k) { return std::string(buffer_kind_name(k)); }

}  // namespace

std::vector<int> range(int n) {
    std::vector<int> out;
    for (int i = 0; i < n; ++i) out.push_back(i);
    return out;
}

bool contains(const std::vector<int>& list, int x) { return std::find(list.begin(), list.end(), x) != list.end(); }

// ---- Store ------------------------------------------------------------------------

Store::Slot& Store::Slot::operator=(Value v) {
    // Replacing drops the old value's reference after the new one is in place, as Python does.
    Value old;
    auto it = store_->map_.find(key_);
    if (it != store_->map_.end()) {
        old = std::move(it->second);
        it->second = std::move(v);
    } else {
        store_->map_.emplace(key_, std::move(v));
    }
    return *this;
}

Store::Slot::operator const Value&() const { return store_->get(key_); }

const Value& Store::get(Key k) const {
    auto it = map_.find(k);
    if (it == map_.end()) owner_->fail("read", k.a, fmt::format("{} is not stored", key_text(k)));
    return it->second;
}

void Store::erase(Key k) {
    auto it = map_.find(k);
    if (it == map_.end()) owner_->fail("del", k.a, fmt::format("{} is not stored", key_text(k)));
    Value old = std::move(it->second);
    map_.erase(it);
}

std::string Store::key_text(Key k) const {
    return k.b < 0 ? fmt::format("{}[{}]", name_, k.a) : fmt::format("{}[{}, {}]", name_, k.a, k.b);
}

// ---- Model ------------------------------------------------------------------------

Model::Model(const ModelDims& dims, int rank_id)
    : LAYERS(dims.layers),
      BATCHES(dims.batches),
      RANKS(dims.ranks),
      rank(rank_id),
      dims_(dims),
      weights(*this, "weights"),
      opt_states(*this, "opt_states"),
      activations(*this, "activations"),
      grad_activations(*this, "grad_activations"),
      grad_weights(*this, "grad_weights") {
    program_.rank = rank_id;
}

Model::~Model() {
    // Values die before the program they report to.
    weights.clear();
    opt_states.clear();
    activations.clear();
    grad_activations.clear();
    grad_weights.clear();
}

void Model::fail(const std::string& op, int layer, const std::string& what) const {
    throw ScheduleError(fmt::format("rank {}: {}{}: {}", rank, op, layer >= 0 ? fmt::format(" layer {}", layer) : "",
                                    what));
}

void Model::check(bool condition, const char* what) const {
    if (!condition) fail("assert", -1, what);
}

std::int64_t Model::elems_of(BufferKind kind, std::size_t batches, std::size_t shards, int total) const {
    const auto shard_elems = dims_.full_weight_elems() / total;
    switch (kind) {
        case BufferKind::weight:
        case BufferKind::weight_grad: return shard_elems * static_cast<std::int64_t>(shards);
        case BufferKind::opt_state: return 2 * shard_elems * static_cast<std::int64_t>(shards);  // Adam's m and v
        case BufferKind::activation:
        case BufferKind::activation_grad: return dims_.batch_elems() * static_cast<std::int64_t>(batches);
    }
    return 0;
}

double Model::memory_units() const {
    // puzzle-semantics.md: the sum of what the five stores hold, in the reference's units.
    const auto h = static_cast<double>(dims_.hidden);
    const auto length = static_cast<double>(dims_.tokens);
    double total = 0;
    for (const Store* s : {&weights, &opt_states, &activations, &grad_activations, &grad_weights}) {
        for (const auto& [key, v] : s->entries()) {
            switch (v.kind) {
                case BufferKind::weight:
                case BufferKind::opt_state:
                case BufferKind::weight_grad:
                    total += (static_cast<double>(v.shards.size()) / v.total) * h * h;
                    break;
                case BufferKind::activation:
                case BufferKind::activation_grad:
                    total += static_cast<double>(v.batches.size()) * h * length;
                    break;
            }
        }
    }
    return total;
}

int Model::stores_holding(int buffer_id) const {
    int n = 0;
    for (const Store* s : {&weights, &opt_states, &activations, &grad_activations, &grad_weights})
        for (const auto& [key, v] : s->entries())
            if (v.buffer_id() == buffer_id) ++n;
    return n;
}

Instr& Model::emit(Op op, int layer) {
    Instr in;
    in.op = op;
    in.layer = layer;
    in.puzzle_memory = memory_units();
    in.live_bytes = live_bytes_;
    program_.instrs.push_back(std::move(in));
    return program_.instrs.back();
}

Value Model::new_value(BufferKind kind, int layer, std::vector<int> batches, std::vector<int> shards, int total,
                       int step) {
    Value v;
    v.kind = kind;
    v.layer = layer;
    v.batches = std::move(batches);
    v.shards = std::move(shards);
    v.total = total;
    v.step = step;
    const std::int64_t elems = elems_of(kind, v.batches.size(), v.shards.size(), total);
    const int id = static_cast<int>(program_.buffers.size());
    program_.buffers.push_back(Buffer{kind, elems});
    live_bytes_ += elems * 4;
    v.buffer = std::make_shared<detail::BufferRef>(this, id);
    return v;
}

void Model::release_buffer(int id) {
    if (finished_) return;
    Instr in;
    in.op = Op::release;
    in.ins = {id};
    in.puzzle_memory = memory_units();
    in.live_bytes = live_bytes_;
    program_.instrs.push_back(std::move(in));
    live_bytes_ -= program_.buffers[static_cast<std::size_t>(id)].elems * 4;
}

std::pair<Value, Value> Model::load_weights(int l, int shard, int total) {
    if (l < 0 || l >= LAYERS) fail("load_weights", l, fmt::format("layer outside 0..{}", LAYERS - 1));
    if (total != 1 && total != RANKS)
        fail("load_weights", l, fmt::format("weights split into {} shards; a real run splits into 1 or RANKS ({})",
                                            total, RANKS));
    if (shard < 0 || shard >= total) fail("load_weights", l, fmt::format("shard {} outside 0..{}", shard, total - 1));
    Instr& in = emit(Op::load_weights, l);
    in.shard = shard;
    in.shards = total;
    Value w = new_value(BufferKind::weight, l, {}, {shard}, total, 0);
    Value o = new_value(BufferKind::opt_state, l, {}, {shard}, total, 0);
    program_.instrs.back().outs = {w.buffer_id(), o.buffer_id()};
    return {std::move(w), std::move(o)};
}

Value Model::get_activation(const std::vector<int>& batches) {
    std::vector<int> b = batches;
    std::sort(b.begin(), b.end());
    for (int x : b)
        if (x < 0 || x >= BATCHES) fail("get_activation", -1, fmt::format("batch {} outside 0..{}", x, BATCHES - 1));
    emit(Op::get_activation, 0).batches = b;
    Value a = new_value(BufferKind::activation, 0, b, {}, 1, 0);
    program_.instrs.back().outs = {a.buffer_id()};
    return a;
}

Value Model::forward(int l, const Value& act, const Value& weight) {
    if (weight.kind != BufferKind::weight || !weight.complete() || weight.layer != l)
        fail("forward", l, fmt::format("needs the complete weight of layer {} (got {} of layer {}, {} of {} shards)", l,
                                       kind_text(weight.kind), weight.layer, weight.shards.size(), weight.total));
    if (act.kind != BufferKind::activation || act.layer != l)
        fail("forward", l, fmt::format("needs the activation of layer {} (got {} of layer {})", l, kind_text(act.kind),
                                       act.layer));
    Instr& in = emit(Op::forward, l);
    in.batches = act.batches;
    in.ins = {act.buffer_id(), weight.buffer_id()};
    Value out = new_value(BufferKind::activation, l + 1, act.batches, {}, 1, 0);
    program_.instrs.back().outs = {out.buffer_id()};
    return out;
}

std::pair<Value, Value> Model::backward(int l, const Value& act, const Value& grad, const Value& weight) {
    if (weight.kind != BufferKind::weight || !weight.complete() || weight.layer != l)
        fail("backward", l, fmt::format("needs the complete weight of layer {} (got {} of layer {}, {} of {} shards)",
                                        l, kind_text(weight.kind), weight.layer, weight.shards.size(), weight.total));
    if (act.kind != BufferKind::activation || act.layer != l)
        fail("backward", l, fmt::format("needs the activation of layer {} (got {} of layer {})", l,
                                        kind_text(act.kind), act.layer));
    if (grad.kind != BufferKind::activation_grad || grad.layer != l)
        fail("backward", l, fmt::format("needs the activation grad of layer {} (got {} of layer {})", l,
                                        kind_text(grad.kind), grad.layer));
    if (act.batches != grad.batches)
        fail("backward", l, fmt::format("activation batches {} differ from grad batches {}", act.batches, grad.batches));
    Instr& in = emit(Op::backward, l);
    in.batches = act.batches;
    in.ins = {act.buffer_id(), grad.buffer_id(), weight.buffer_id()};
    Value wgrad = new_value(BufferKind::weight_grad, l, act.batches, weight.shards, weight.total, 0);
    Value agrad = new_value(BufferKind::activation_grad, l - 1, act.batches, {}, 1, 0);
    program_.instrs.back().outs = {wgrad.buffer_id(), agrad.buffer_id()};
    return {std::move(wgrad), std::move(agrad)};
}

Value Model::loss(const Value& act) {
    if (act.kind != BufferKind::activation || act.layer != LAYERS)
        fail("loss", LAYERS, fmt::format("needs the activation of layer {} (got {} of layer {})", LAYERS,
                                         kind_text(act.kind), act.layer));
    emit(Op::loss, LAYERS).ins = {act.buffer_id()};
    Value g = new_value(BufferKind::activation_grad, LAYERS - 1, act.batches, {}, 1, 0);
    program_.instrs.back().outs = {g.buffer_id()};
    return g;
}

std::pair<Value, Value> Model::update(int l, const Value& weight_grad, const Value& weight, const Value& opt_state) {
    if (weight_grad.kind != BufferKind::weight_grad || weight.kind != BufferKind::weight ||
        opt_state.kind != BufferKind::opt_state)
        fail("update", l, "needs a weight grad, a weight and an optimizer state");
    if (weight_grad.layer != l || weight.layer != l || opt_state.layer != l)
        fail("update", l, fmt::format("layers differ: grad {}, weight {}, optimizer state {}", weight_grad.layer,
                                      weight.layer, opt_state.layer));
    if (weight_grad.batches != range(BATCHES))
        fail("update", l, fmt::format("the weight grad covers batches {}, not all {}", weight_grad.batches, BATCHES));
    if (weight_grad.total > 1 && (!includes(weight_grad.shards, weight.shards) ||
                                  !includes(weight_grad.shards, opt_state.shards) || weight.total != weight_grad.total))
        fail("update", l, fmt::format("weight shards {} of {} are not within the grad's {} of {}", weight.shards,
                                      weight.total, weight_grad.shards, weight_grad.total));
    if (weight.step != opt_state.step)
        fail("update", l, fmt::format("weight step {} differs from optimizer state step {}", weight.step,
                                      opt_state.step));
    if (weight.shards != opt_state.shards)
        fail("update", l, "weight and optimizer state hold different shards");
    if (weight.shards.size() != 1 && !weight.complete())
        fail("update", l, "a real run updates a complete weight or a single shard");
    Instr& in = emit(Op::update, l);
    in.ins = {weight_grad.buffer_id(), weight.buffer_id(), opt_state.buffer_id()};
    in.shard = weight.complete() ? 0 : weight.shards.front();
    in.shards = weight.complete() ? 1 : weight.total;
    if (!weight.complete()) {
        // Where the held shard starts inside the gradient buffer: at its own place in a
        // complete gradient, else at its position among the shards the gradient holds.
        const std::int64_t shard_elems = dims_.full_weight_elems() / weight.total;
        if (weight_grad.complete()) {
            in.grad_offset = static_cast<std::int64_t>(weight.shards.front()) * shard_elems;
        } else {
            const auto pos = std::find(weight_grad.shards.begin(), weight_grad.shards.end(), weight.shards.front()) -
                             weight_grad.shards.begin();
            in.grad_offset = static_cast<std::int64_t>(pos) * shard_elems;
        }
    }
    // Adam runs in place: the new values live in the old buffers.
    Value w = weight;
    Value o = opt_state;
    w.step += 1;
    o.step += 1;
    return {std::move(w), std::move(o)};
}

Value Model::add(const Value& a, const Value& b) {
    if (a.kind != BufferKind::weight_grad || b.kind != BufferKind::weight_grad)
        fail("add", a.layer, "adds weight grads only");
    if (a.layer != b.layer) fail("add", a.layer, fmt::format("layers differ: {} and {}", a.layer, b.layer));
    if (a.shards != b.shards || a.total != b.total) fail("add", a.layer, "the two grads hold different shards");
    if (stores_holding(a.buffer_id()) > 1)
        fail("add", a.layer, "the left operand's buffer is held by another store entry; adding in place would change it");
    emit(Op::accumulate, a.layer).ins = {a.buffer_id(), b.buffer_id()};
    Value out = a;
    out.batches = sorted_union(a.batches, b.batches);
    return out;
}

Value Model::fake_grad(int l, const std::vector<int>& batches) {
    std::vector<int> b = batches;
    std::sort(b.begin(), b.end());
    emit(Op::fake_grad, l);
    Value g = new_value(BufferKind::weight_grad, l, b, range(RANKS), RANKS, 0);
    program_.instrs.back().outs = {g.buffer_id()};
    return g;
}

Value Model::allreduce(const Value& v, int l) {
    if (stores_holding(v.buffer_id()) > 1)
        fail("allreduce", l, "the buffer is held by another store entry; reducing in place would change it");
    emit(Op::allreduce, l).ins = {v.buffer_id()};
    Value out = v;
    out.batches = range(BATCHES);  // the sum over all ranks (check_programs pairs the calls)
    return out;
}

Value Model::allgather(const Value& v, int l) {
    if (v.total != RANKS || v.shards != std::vector<int>{rank})
        fail("allgather", l, fmt::format("NCCL gathers rank r's shard r of RANKS; this rank holds shards {} of {}",
                                         v.shards, v.total));
    emit(Op::allgather, l).ins = {v.buffer_id()};
    Value out = new_value(v.kind, v.layer, v.batches, range(RANKS), RANKS, v.step);
    program_.instrs.back().outs = {out.buffer_id()};
    return out;
}

Value Model::scatterreduce(const Value& v, int l) {
    if (!v.complete()) fail("scatterreduce", l, fmt::format("needs a complete value (got {} of {} shards)",
                                                            v.shards.size(), v.total));
    emit(Op::scatterreduce, l).ins = {v.buffer_id()};
    Value out = new_value(v.kind, v.layer, range(BATCHES), {rank}, RANKS, v.step);
    program_.instrs.back().outs = {out.buffer_id()};
    return out;
}

void Model::pass_to(int dst, const Value& v) {
    if (dst < 0 || dst >= RANKS || dst == rank)
        fail("pass_to", -1, fmt::format("destination {} is not another rank in 0..{}", dst, RANKS - 1));
    Instr& in = emit(Op::send, -1);
    in.peer = dst;
    in.ins = {v.buffer_id()};
    in.message = Message{v.kind, v.layer, v.batches, program_.buffers[static_cast<std::size_t>(v.buffer_id())].elems};
}

Value Model::receive_activation(int src, int layer, const std::vector<int>& batches) {
    if (src < 0 || src >= RANKS || src == rank)
        fail("receive", -1, fmt::format("source {} is not another rank in 0..{}", src, RANKS - 1));
    Instr& in = emit(Op::recv, -1);
    in.peer = src;
    Value v = new_value(BufferKind::activation, layer, batches, {}, 1, 0);
    program_.instrs.back().outs = {v.buffer_id()};
    program_.instrs.back().message =
        Message{v.kind, v.layer, v.batches, program_.buffers[static_cast<std::size_t>(v.buffer_id())].elems};
    return v;
}

Value Model::receive_grad(int src, int layer, const std::vector<int>& batches) {
    if (src < 0 || src >= RANKS || src == rank)
        fail("receive", -1, fmt::format("source {} is not another rank in 0..{}", src, RANKS - 1));
    Instr& in = emit(Op::recv, -1);
    in.peer = src;
    Value v = new_value(BufferKind::activation_grad, layer, batches, {}, 1, 0);
    program_.instrs.back().outs = {v.buffer_id()};
    program_.instrs.back().message =
        Message{v.kind, v.layer, v.batches, program_.buffers[static_cast<std::size_t>(v.buffer_id())].elems};
    return v;
}

void Model::set_final_weight(int l, const Value& weight) {
    if (weight.kind != BufferKind::weight || weight.layer != l)
        fail("set_final_weight", l, fmt::format("needs the weight of layer {}", l));
    if (weight.shards.size() != 1 && !weight.complete())
        fail("set_final_weight", l, "a real run checks a complete weight or a single shard");
    Instr& in = emit(Op::set_final, l);
    in.ins = {weight.buffer_id()};
    in.shard = weight.complete() ? 0 : weight.shards.front();
    in.shards = weight.complete() ? 1 : weight.total;
    in.step = weight.step;
}

RankProgram Model::finish() {
    weights.clear();
    opt_states.clear();
    activations.clear();
    grad_activations.clear();
    grad_weights.clear();
    finished_ = true;
    return std::move(program_);
}

}  // namespace dtsim::calib::puzzle
