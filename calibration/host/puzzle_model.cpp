#include "host/puzzle_model.hpp"

#include "dtsim/puzzle/cost_model.hpp"

#include <fmt/format.h>

#include <any>
#include <stdexcept>

namespace dtsim::harness {

namespace detail {
BufferRef::~BufferRef() {
    if (owner != nullptr) owner->release_buffer(id);
}
}  // namespace detail

namespace {

std::vector<int> ids_of(const IdSet& s) {
    std::vector<int> out;
    s.for_each([&](std::int64_t id) { out.push_back(static_cast<int>(id)); });
    return out;
}

// The puzzle world's size of a value (dtsim::puzzle::size_of for the value's type).
puzzle::Size puzzle_size(const Value& v) {
    const puzzle::CostModel& c = puzzle::puzzle_costs();
    switch (v.kind) {
        case BufferKind::weight: return c.weight(v.shards.size(), v.total);
        case BufferKind::opt_state: return c.opt_state(v.shards.size(), v.total);
        case BufferKind::weight_grad: return c.weight_grad(v.shards.size(), v.total);
        case BufferKind::activation: return c.activation(v.batches.size());
        case BufferKind::activation_grad: return c.activation_grad(v.batches.size());
    }
    return {};
}

std::string describe(const Wire& w) {
    return fmt::format("{} elements of {} (shards {} of {})", w.elems, buffer_kind_name(w.kind), w.shards.str(),
                       w.total);
}

}  // namespace

std::string Value::str() const {
    const std::string shard_text =
        total == 1 ? std::string() : fmt::format(", shards {} of {}", shards.str(), total);
    return fmt::format("{} (layer {}, batches {}{})", buffer_kind_name(kind), layer, batches.str(), shard_text);
}

Value operator+(const Value& a, const Value& b) {
    if (!a.buffer) throw std::logic_error("harness: adding a value that has no buffer");
    return a.buffer->owner->add(a, b);
}

// ---- Store ------------------------------------------------------------------------

Slot& Slot::operator=(Value v) {
    // The new value is counted before the old one goes, as dtsim::puzzle's stores do; the old
    // value's reference is dropped after the new one is in place, as Python does.
    Value old;
    store_->owner_->stored(v);
    auto it = store_->map_.find(key_);
    if (it != store_->map_.end()) {
        store_->owner_->unstored(it->second);
        old = std::move(it->second);
        it->second = std::move(v);
    } else {
        store_->map_.emplace(key_, std::move(v));
    }
    return *this;
}

Slot::operator const Value&() const { return store_->get(key_); }

const Value& Store::get(Key k) const {
    auto it = map_.find(k);
    if (it == map_.end()) owner_->fail("read", k.a, fmt::format("{} is not stored (KeyError)", key_text(k)));
    return it->second;
}

void Store::erase(Key k) {
    auto it = map_.find(k);
    if (it == map_.end()) owner_->fail("del", k.a, fmt::format("{} is not stored (KeyError)", key_text(k)));
    owner_->unstored(it->second);
    Value old = std::move(it->second);
    map_.erase(it);
}

void Store::clear() {
    while (!map_.empty()) erase(map_.begin()->first);
}

std::string Store::key_text(Key k) const {
    return k.b == Key::kNone ? fmt::format("{}[{}]", name_, k.a) : fmt::format("{}[{}, {}]", name_, k.a, k.b);
}

// ---- Model ------------------------------------------------------------------------

Model::Model(Gpu& gpu, const ModelDims& dims)
    : rank(gpu.rank()),
      RANKS(gpu.sim().ranks()),
      LAYERS(dims.layers),
      BATCHES(dims.batches),
      gpu_(&gpu),
      dims_(dims),
      weights(*this, "weights"),
      opt_states(*this, "opt_states"),
      activations(*this, "activations"),
      grad_activations(*this, "grad_activations"),
      grad_weights(*this, "grad_weights") {
    program_.rank = rank;
    dims_.ranks = RANKS;
}

Model::~Model() {
    // Values die before the program they report to.
    finished_ = true;
    for (Store* s : {&weights, &opt_states, &activations, &grad_activations, &grad_weights}) s->clear();
}

void Model::fail(std::string_view op, int layer, const std::string& what) const {
    throw PuzzleError(rank, std::string(op), layer < 0 ? kNoLayer : layer, what);
}

void Model::require(bool cond, const std::string& message) const {
    if (!cond) fail("assert", -1, message);
}

void Model::stored(const Value& v) { meter_.add(puzzle_size(v)); }
void Model::unstored(const Value& v) { meter_.sub(puzzle_size(v)); }

std::int64_t Model::elems_of(BufferKind kind, std::int64_t batches, std::int64_t shards, int total) const {
    const std::int64_t shard_elems = dims_.full_weight_elems() / total;
    switch (kind) {
        case BufferKind::weight:
        case BufferKind::weight_grad: return shard_elems * shards;
        case BufferKind::opt_state: return 2 * shard_elems * shards;  // Adam's m and v
        case BufferKind::activation:
        case BufferKind::activation_grad: return dims_.batch_elems() * batches;
    }
    return 0;
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
    in.puzzle_memory = memory();
    in.live_bytes = live_bytes_;
    program_.instrs.push_back(std::move(in));
    return program_.instrs.back();
}

Value Model::new_value(BufferKind kind, int layer, IdSet batches, IdSet shards, int total, int step) {
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

Wire Model::wire_of(const Value& v) const {
    return Wire{v.kind,  v.layer, v.batches, v.shards, v.total,
                v.step, program_.buffers.at(static_cast<std::size_t>(v.buffer_id())).elems};
}

void Model::release_buffer(int id) {
    if (finished_) return;
    Instr in;
    in.op = Op::release;
    in.ins = {id};
    in.puzzle_memory = memory();
    in.live_bytes = live_bytes_;
    program_.instrs.push_back(std::move(in));
    live_bytes_ -= program_.buffers[static_cast<std::size_t>(id)].elems * 4;
}

std::pair<Value, Value> Model::load_weights(int l, int shard, int total) {
    if (l < 0 || l >= LAYERS) fail("load_weights", l, fmt::format("layer outside 0..{}", LAYERS - 1));
    if (total != 1 && total != RANKS)
        fail("load_weights", l,
             fmt::format("weights split into {} shards; a real run splits into 1 or RANKS ({})", total, RANKS));
    if (shard < 0 || shard >= total) fail("load_weights", l, fmt::format("shard {} outside 0..{}", shard, total - 1));
    Instr& in = emit(Op::load_weights, l);
    in.shard = shard;
    in.shards = total;
    Value w = new_value(BufferKind::weight, l, {}, IdSet::single(shard), total, 0);
    Value o = new_value(BufferKind::opt_state, l, {}, IdSet::single(shard), total, 0);
    program_.instrs.back().outs = {w.buffer_id(), o.buffer_id()};
    return {std::move(w), std::move(o)};
}

Value Model::get_activation(IdSet batches) {
    if (!batches.empty() && (batches.min() < 0 || batches.max() >= BATCHES))
        fail("get_activation", -1, fmt::format("batches {} outside 0..{}", batches.str(), BATCHES - 1));
    emit(Op::get_activation, 0).batches = ids_of(batches);
    Value a = new_value(BufferKind::activation, 0, std::move(batches), {}, 1, 0);
    program_.instrs.back().outs = {a.buffer_id()};
    return a;
}

Value Model::forward(int l, const Value& act, const Value& weight) {
    if (weight.kind != BufferKind::weight || !weight.complete() || weight.layer != l)
        fail("forward", l, fmt::format("needs the complete weight of layer {} (got {})", l, weight.str()));
    if (act.kind != BufferKind::activation || act.layer != l)
        fail("forward", l, fmt::format("needs the activation of layer {} (got {})", l, act.str()));
    Instr& in = emit(Op::forward, l);
    in.batches = ids_of(act.batches);
    in.ins = {act.buffer_id(), weight.buffer_id()};
    Value out = new_value(BufferKind::activation, l + 1, act.batches, {}, 1, 0);
    program_.instrs.back().outs = {out.buffer_id()};
    return out;
}

std::pair<Value, Value> Model::backward(int l, const Value& act, const Value& grad, const Value& weight) {
    if (weight.kind != BufferKind::weight || !weight.complete() || weight.layer != l)
        fail("backward", l, fmt::format("needs the complete weight of layer {} (got {})", l, weight.str()));
    if (act.kind != BufferKind::activation || act.layer != l)
        fail("backward", l, fmt::format("needs the activation of layer {} (got {})", l, act.str()));
    if (grad.kind != BufferKind::activation_grad || grad.layer != l)
        fail("backward", l, fmt::format("needs the activation grad of layer {} (got {})", l, grad.str()));
    if (act.batches != grad.batches)
        fail("backward", l,
             fmt::format("activation batches {} differ from grad batches {}", act.batches.str(), grad.batches.str()));
    Instr& in = emit(Op::backward, l);
    in.batches = ids_of(act.batches);
    in.ins = {act.buffer_id(), grad.buffer_id(), weight.buffer_id()};
    // A complete gradient, as the puzzle's (WeightGrad{layer, batches}: shard 0 of 1).
    Value wgrad = new_value(BufferKind::weight_grad, l, act.batches, IdSet::single(0), 1, 0);
    Value agrad = new_value(BufferKind::activation_grad, l - 1, act.batches, {}, 1, 0);
    program_.instrs.back().outs = {wgrad.buffer_id(), agrad.buffer_id()};
    return {std::move(wgrad), std::move(agrad)};
}

Value Model::loss(const Value& act) {
    if (act.kind != BufferKind::activation || act.layer != LAYERS)
        fail("loss", LAYERS, fmt::format("needs the activation of layer {} (got {})", LAYERS, act.str()));
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
    if (!weight_grad.batches.is_prefix(BATCHES))
        fail("update", l, fmt::format("the weight grad covers batches {}, not all {}", weight_grad.batches.str(),
                                      BATCHES));
    if (weight_grad.total > 1 &&
        (!weight.shards.is_subset_of(weight_grad.shards) || !opt_state.shards.is_subset_of(weight_grad.shards) ||
         weight.total != weight_grad.total))
        fail("update", l, fmt::format("weight shards {} of {} are not within the grad's {} of {}", weight.shards.str(),
                                      weight.total, weight_grad.shards.str(), weight_grad.total));
    if (weight.step != opt_state.step)
        fail("update", l,
             fmt::format("weight step {} differs from optimizer state step {}", weight.step, opt_state.step));
    if (weight.shards != opt_state.shards) fail("update", l, "weight and optimizer state hold different shards");
    if (weight.shards.size() != 1 && !weight.complete())
        fail("update", l, "a real run updates a complete weight or a single shard");
    Instr& in = emit(Op::update, l);
    in.ins = {weight_grad.buffer_id(), weight.buffer_id(), opt_state.buffer_id()};
    in.shard = weight.complete() ? 0 : static_cast<int>(weight.shards.min());
    in.shards = weight.complete() ? 1 : weight.total;
    if (!weight.complete()) {
        // Where the held shard starts inside the gradient buffer: at its own place in a
        // complete gradient, else at its position among the shards the gradient holds.
        const std::int64_t shard_elems = dims_.full_weight_elems() / weight.total;
        const std::int64_t s = weight.shards.min();
        std::int64_t pos = s;
        if (!weight_grad.complete()) {
            pos = 0;
            weight_grad.shards.for_each([&](std::int64_t g) { pos += g < s ? 1 : 0; });
        }
        in.grad_offset = pos * shard_elems;
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
    if (a.buffer->owner != this || !b.buffer || b.buffer->owner != this)
        fail("add", a.layer, "adds values of one rank only");
    if (a.layer != b.layer) fail("add", a.layer, fmt::format("layers differ: {} and {}", a.layer, b.layer));
    if (a.shards != b.shards || a.total != b.total) fail("add", a.layer, "the two grads hold different shards");
    if (stores_holding(a.buffer_id()) > 1)
        fail("add", a.layer,
             "the left operand's buffer is held by another store entry; adding in place would change it");
    emit(Op::accumulate, a.layer).ins = {a.buffer_id(), b.buffer_id()};
    Value out = a;
    out.batches |= b.batches;
    return out;
}

Value Model::fake_grad(int l, IdSet batches) {
    emit(Op::fake_grad, l);
    Value g = new_value(BufferKind::weight_grad, l, std::move(batches), IdSet::single(0), 1, 0);
    program_.instrs.back().outs = {g.buffer_id()};
    return g;
}

Task<Wire> Model::join(Op op, int layer, Wire w) {
    // Members contribute in arrival order; one whose value does not fit with the others' fails.
    auto combine = [op, layer](Wire& acc, const Wire& x, int from) {
        if (x.kind != acc.kind || x.total != acc.total || x.elems != acc.elems ||
            (op != Op::allgather && x.shards != acc.shards))
            throw PuzzleError(from, std::string(op_name(op)), layer,
                              fmt::format("gives {} where the ranks before it in the round gave {}", describe(x),
                                          describe(acc)));
        if (op == Op::allgather)
            acc.shards |= x.shards;
        else
            acc.batches |= x.batches;  // the sum of the members' gradients
    };
    const OpCode code = OpCode::of(op_name(op));  // the puzzle's names, which the engine's errors say
    co_return (co_await gpu_->sim().world().collective(*gpu_, code, layer, std::move(w), combine)).value;
}

Task<Value> Model::allreduce(const Value& v, int l) {
    if (stores_holding(v.buffer_id()) > 1)
        fail("allreduce", l, "the buffer is held by another store entry; reducing in place would change it");
    Value out = v;
    const Wire all = co_await join(Op::allreduce, l, wire_of(v));
    emit(Op::allreduce, l).ins = {out.buffer_id()};
    out.batches = all.batches;  // the sum over all ranks, in place
    co_return out;
}

Task<Value> Model::allgather(const Value& v, int l) {
    if (v.total != RANKS || v.shards != IdSet::single(rank))
        fail("allgather", l,
             fmt::format("NCCL gathers rank r's shard r of RANKS; this rank holds shards {} of {}", v.shards.str(),
                         v.total));
    const Value in = v;
    const Wire all = co_await join(Op::allgather, l, wire_of(v));
    emit(Op::allgather, l).ins = {in.buffer_id()};
    Value out = new_value(in.kind, in.layer, in.batches, all.shards, RANKS, in.step);
    program_.instrs.back().outs = {out.buffer_id()};
    co_return out;
}

Task<Value> Model::scatterreduce(const Value& v, int l) {
    if (!v.complete())
        fail("scatterreduce", l, fmt::format("needs a complete value (got {})", v.str()));
    const Value in = v;
    const Wire all = co_await join(Op::scatterreduce, l, wire_of(v));
    emit(Op::scatterreduce, l).ins = {in.buffer_id()};
    Value out = new_value(in.kind, in.layer, all.batches, IdSet::single(rank), RANKS, in.step);
    program_.instrs.back().outs = {out.buffer_id()};
    co_return out;
}

Task<> Model::pass_to(int dst, const Value& v) {
    if (dst < 0 || dst >= RANKS || dst == rank)
        fail("pass_to", -1, fmt::format("destination {} is not another rank in 0..{}", dst, RANKS - 1));
    Instr& in = emit(Op::send, -1);
    in.peer = dst;
    in.ins = {v.buffer_id()};
    in.message = wire_of(v);
    Message m{std::any(*in.message), gpu_->clock(), 0.0, rank};
    co_await gpu_->sim().send(*gpu_, dst, std::move(m));
}

Task<Value> Model::receive() {
    const Message m = co_await gpu_->sim().receive(*gpu_);
    const Wire* w = std::any_cast<Wire>(&m.payload);
    if (!w) fail("receive", -1, fmt::format("rank {} passed something that is not a puzzle value", m.from));
    Instr& in = emit(Op::recv, -1);
    in.peer = m.from;
    Value v = new_value(w->kind, w->layer, w->batches, w->shards, w->total, w->step);
    program_.instrs.back().outs = {v.buffer_id()};
    program_.instrs.back().message = wire_of(v);
    co_return v;
}

void Model::set_final_weight(int l, const Value& weight) {
    if (weight.kind != BufferKind::weight || weight.layer != l)
        fail("set_final_weight", l, fmt::format("needs the weight of layer {} (got {})", l, weight.str()));
    if (weight.shards.size() != 1 && !weight.complete())
        fail("set_final_weight", l, "a real run checks a complete weight or a single shard");
    Instr& in = emit(Op::set_final, l);
    in.ins = {weight.buffer_id()};
    in.shard = weight.complete() ? 0 : static_cast<int>(weight.shards.min());
    in.shards = weight.complete() ? 1 : weight.total;
    in.step = weight.step;
}

RankProgram Model::finish() {
    for (Store* s : {&weights, &opt_states, &activations, &grad_activations, &grad_weights}) s->clear();
    finished_ = true;
    return std::move(program_);
}

}  // namespace dtsim::harness
