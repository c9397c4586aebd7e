// dtsim._core: the puzzle world for Python (docs/python.md). The values, the
// five stores with Python's mapping protocol, a Model per rank bound to a
// Dist (one Simulation), and the driver that runs each rank's Python
// coroutine on the engine: a C++ Task per rank sends into the coroutine, and
// every operation it awaits (a Request) is awaited by that Task on the model,
// parking the rank exactly as a C++ strategy's co_await does.
#include "dtsim/puzzle/model.hpp"
#include "dtsim/puzzle/registry.hpp"
#include "dtsim/puzzle/run.hpp"
#include "dtsim/render.hpp"
#include "dtsim/trace_io.hpp"

#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <fmt/format.h>

#include <algorithm>
#include <memory>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace py = pybind11;

namespace dtsim::python {
namespace {

using puzzle::Activation;
using puzzle::ActivationGrad;
using puzzle::Key;
using puzzle::Model;
using puzzle::OptState;
using puzzle::Store;
using puzzle::Weight;
using puzzle::WeightGrad;

// ------------------------------------------------------------------ id sets

// A batch or shard set from any iterable of ints (range, list, set, frozenset).
IdSet to_ids(const py::handle& h) {
    IdSet ids;
    for (const py::handle item : h) ids.insert(item.cast<std::int64_t>());
    return ids;
}

py::frozenset to_frozenset(const IdSet& ids) {
    py::set s;
    ids.for_each([&](std::int64_t v) { s.add(py::int_(v)); });
    return py::frozenset(s);
}

// A store key: an int or a pair of ints, as the Python dicts are indexed.
Key to_key(const py::handle& h) {
    if (py::isinstance<py::tuple>(h)) {
        const auto t = py::reinterpret_borrow<py::tuple>(h);
        if (t.size() != 2) throw py::key_error(fmt::format("a store key is an int or a pair of ints, not {}", py::repr(h).cast<std::string>()));
        return Key(t[0].cast<int>(), t[1].cast<int>());
    }
    if (!py::isinstance<py::int_>(h))
        throw py::key_error(fmt::format("a store key is an int or a pair of ints, not {}", py::repr(h).cast<std::string>()));
    return Key(h.cast<int>());
}

// ------------------------------------------------------------------ a Dist

// The simulation of one Dist and the models made on it, by rank. Models are
// destroyed before the arenas their stores keep keys in, and both before the
// simulation whose GPUs the models drive.
struct World {
    explicit World(int ranks) : sim(ranks), models(static_cast<std::size_t>(ranks)) {}
    World(const World&) = delete;
    World& operator=(const World&) = delete;
    ~World() {
        models.clear();
        arenas.reset();
    }

    Simulation sim;
    std::unique_ptr<puzzle::StoreArenas> arenas;  // for the layer count of the first model
    int arena_layers = -1;
    std::vector<std::unique_ptr<Model>> models;
    bool ran = false;
    // The Python exception a rank's coroutine raised, re-raised by run_world when it
    // was the run's first error (failed: a rank's driver has failed).
    py::object error;
    bool failed = false;
    std::optional<Trace> trace;  // taken once, after the run

    [[nodiscard]] int ranks() const { return sim.ranks(); }
};

// The C++ side of dtsim.puzzles.Dist.
class PyDist {
public:
    explicit PyDist(int ranks) {
        if (ranks < 1) throw py::value_error(fmt::format("Dist: ranks must be at least 1 (got {})", ranks));
        world = std::make_shared<World>(ranks);
    }
    std::shared_ptr<World> world;
};

// What a Python store did to the engine's store of its kind, not yet applied.
template <class V>
void apply(Store<V>& store, const Key& key, PyObject* value) {
    if (value == Py_None)
        store.erase(key);
    else
        store.set(key, V(py::handle(value).cast<const V&>()));
}

// A model as Python holds it: the world it lives in, kept alive, the model,
// and what its stores did since the model's last operation. The stores
// (dtsim.puzzles.Store, dicts) append (store, key, value or None to delete) to
// `pending`, which every operation first applies to the engine's stores in
// order: an operation records the rank's memory as it is then, as a C++
// strategy's does, and a store write costs no call into the engine.
struct PyModel {
    std::shared_ptr<World> world;
    Model* model;
    py::list pending;

    Model& flushed() {
        PyObject* list = pending.ptr();
        const Py_ssize_t n = PyList_GET_SIZE(list);
        if (n == 0) return *model;
        try {
            for (Py_ssize_t i = 0; i < n; ++i) {
                PyObject* entry = PyList_GET_ITEM(list, i);
                const long which = PyLong_AsLong(PyTuple_GET_ITEM(entry, 0));
                const Key key = to_key(PyTuple_GET_ITEM(entry, 1));
                PyObject* value = PyTuple_GET_ITEM(entry, 2);
                switch (which) {
                    case 0: apply(model->weights, key, value); break;
                    case 1: apply(model->opt_states, key, value); break;
                    case 2: apply(model->activations, key, value); break;
                    case 3: apply(model->grad_activations, key, value); break;
                    default: apply(model->grad_weights, key, value); break;
                }
            }
        } catch (...) {
            PyList_SetSlice(list, 0, n, nullptr);
            throw;
        }
        PyList_SetSlice(list, 0, n, nullptr);
        return *model;
    }
};

// ------------------------------------------------------------------ requests

// What awaiting a collective or a pass yields to the driver: the operation and
// its arguments. Its `__await__` (dtsim.puzzles: `return (yield self)`) yields
// it; the driver awaits the operation and sends the result back into the
// coroutine, where it is the value of the `await`.
enum class RequestOp { allreduce, allgather, scatterreduce, pass_to, receive };

struct Request {
    RequestOp op;
    int layer = kNoLayer;  // collectives
    int dst = -1;          // pass_to
    py::object value;      // what is reduced, gathered or passed
    py::object owner_ref;      // the Python model it was made from, kept alive while it waits
    PyModel* owner = nullptr;  // the same, as the model
    Model* model = nullptr;
};

const char* request_name(RequestOp op) {
    switch (op) {
        case RequestOp::allreduce: return "allreduce";
        case RequestOp::allgather: return "allgather";
        case RequestOp::scatterreduce: return "scatterreduce";
        case RequestOp::pass_to: return "pass_to";
        case RequestOp::receive: return "receive";
    }
    return "?";
}

// ------------------------------------------------------------------ the driver

// A rank's Python coroutine raised: the exception is kept in the world and
// re-raised by run() as it was raised (this marks the rank's Task as failed).
struct PythonRaised : std::runtime_error {
    using std::runtime_error::runtime_error;
};

py::object received_value(const puzzle::Received& r) {
    // Passed values are the puzzle's value types or Python objects; try each.
    try { return py::cast(r.as<Activation>()); } catch (const PuzzleError&) {}
    try { return py::cast(r.as<ActivationGrad>()); } catch (const PuzzleError&) {}
    try { return r.as<py::object>(); } catch (const PuzzleError&) {}
    try { return py::cast(r.as<WeightGrad>()); } catch (const PuzzleError&) {}
    try { return py::cast(r.as<Weight>()); } catch (const PuzzleError&) {}
    return py::cast(r.as<OptState>());
}

Task<> nothing() { co_return; }

// Steps `coro` (rank `model.rank`'s coroutine) until it returns, awaiting on
// the model each operation it yields; its return value goes to `*result`.
Task<> drive_steps(World& world, Model& model, py::object coro, py::object* result) {
    py::object send = py::none();  // the result of the operation awaited last
    for (;;) {
        PyObject* out = nullptr;
        const PySendResult sent = PyIter_Send(coro.ptr(), send.ptr(), &out);
        if (sent == PYGEN_RETURN) {
            *result = py::reinterpret_steal<py::object>(out);
            co_return;
        }
        if (sent == PYGEN_ERROR) {
            py::error_already_set e;
            if (!world.failed) world.error = e.value();  // the run's first error is the one raised
            world.failed = true;
            throw PythonRaised(e.what());
        }
        const auto yielded = py::reinterpret_steal<py::object>(out);
        if (!py::isinstance<Request>(yielded))
            throw PuzzleError(model.rank, "await", kNoLayer,
                              fmt::format("the coroutine awaited {}, which is not a dtsim operation (only the "
                                          "model's allreduce, allgather, scatterreduce, pass_to and receive can "
                                          "be awaited on the engine; asyncio's own awaitables need its event loop)",
                                          py::repr(yielded).cast<std::string>()));
        auto& req = yielded.cast<Request&>();
        if (req.model != &model)
            throw PuzzleError(model.rank, request_name(req.op), req.layer,
                              fmt::format("awaited an operation of rank {}'s model", req.model->rank));
        req.owner->flushed();  // what the stores did before the await
        switch (req.op) {
            case RequestOp::allreduce: {
                const auto v = req.value.cast<WeightGrad>();
                send = py::cast(co_await model.allreduce(v, req.layer));
                break;
            }
            case RequestOp::scatterreduce: {
                const auto v = req.value.cast<WeightGrad>();
                send = py::cast(co_await model.scatterreduce(v, req.layer));
                break;
            }
            case RequestOp::allgather: {
                if (py::isinstance<Weight>(req.value)) {
                    const auto v = req.value.cast<Weight>();
                    send = py::cast(co_await model.allgather(v, req.layer));
                } else if (py::isinstance<OptState>(req.value)) {
                    const auto v = req.value.cast<OptState>();
                    send = py::cast(co_await model.allgather(v, req.layer));
                } else {
                    const auto v = req.value.cast<WeightGrad>();
                    send = py::cast(co_await model.allgather(v, req.layer));
                }
                break;
            }
            case RequestOp::pass_to: {
                const py::object& v = req.value;
                if (py::isinstance<Activation>(v)) {
                    co_await model.pass_to(req.dst, v.cast<Activation>());
                } else if (py::isinstance<ActivationGrad>(v)) {
                    co_await model.pass_to(req.dst, v.cast<ActivationGrad>());
                } else if (py::isinstance<WeightGrad>(v)) {
                    co_await model.pass_to(req.dst, v.cast<WeightGrad>());
                } else if (py::isinstance<Weight>(v)) {
                    co_await model.pass_to(req.dst, v.cast<Weight>());
                } else if (py::isinstance<OptState>(v)) {
                    co_await model.pass_to(req.dst, v.cast<OptState>());
                } else {
                    co_await model.pass_to(req.dst, py::object(v));
                }
                send = py::none();
                break;
            }
            case RequestOp::receive: {
                const puzzle::Received r = co_await model.receive();
                send = received_value(r);
                break;
            }
        }
    }
}

// drive_steps, noting the engine's errors: the first error of a run, Python's
// or the engine's, is the one run_world raises (the engine goes on resuming
// the other ranks until it stops, and they may fail too).
Task<> drive(World& world, Model& model, py::object coro, py::object* result) {
    try {
        co_await drive_steps(world, model, std::move(coro), result);
    } catch (const PythonRaised&) {
        throw;
    } catch (...) {
        world.failed = true;
        throw;
    }
}

// Runs the coroutines (pairs of a model and its coroutine) on the Dist's
// engine; returns their results in the order given. Ranks without a coroutine
// do nothing. Raises the exception a coroutine raised, or the engine's error.
py::list run_world(PyDist& dist, const py::list& jobs) {
    World& w = *dist.world;
    if (w.ran) throw py::value_error("this Dist has already run its ranks; make a new Dist for another run");
    const auto n = static_cast<std::size_t>(w.ranks());
    std::vector<py::object> coros(n);
    std::vector<std::size_t> order;  // the rank of each job
    for (const py::handle job : jobs) {
        const auto pair = job.cast<py::tuple>();
        const Model& model = *pair[0].cast<PyModel&>().model;
        if (&model.gpu.sim() != &w.sim) throw py::value_error("every coroutine's model must be on the same Dist");
        const auto r = static_cast<std::size_t>(model.rank);
        if (coros[r]) throw py::value_error(fmt::format("two coroutines run on rank {}", model.rank));
        coros[r] = pair[1].cast<py::object>();
        order.push_back(r);
    }
    std::vector<py::object> results(n);
    w.ran = true;
    try {
        w.sim.run([&](Gpu& g) -> Task<> {
            const auto r = static_cast<std::size_t>(g.rank());
            if (!coros[r]) return nothing();
            return drive(w, *w.models[r], coros[r], &results[r]);
        });
    } catch (const ScheduleError&) {
        if (w.error) {
            const py::object err = std::exchange(w.error, py::object());
            PyErr_SetObject(reinterpret_cast<PyObject*>(Py_TYPE(err.ptr())), err.ptr());
            throw py::error_already_set();
        }
        throw;
    }
    py::list out;
    for (std::size_t r : order) out.append(results[r]);
    return out;
}

// ------------------------------------------------------------------ models

Model& make_model(PyDist& dist, int layers, int batches, int rank) {
    World& w = *dist.world;
    if (rank < 0 || rank >= w.ranks())
        throw py::value_error(fmt::format("Model: rank {} is not in the Dist's ranks 0..{}", rank, w.ranks() - 1));
    if (layers < 0 || batches < 0)
        throw py::value_error(fmt::format("Model: layers and batches must be at least 0 (got {}, {})", layers, batches));
    auto& slot = w.models[static_cast<std::size_t>(rank)];
    if (slot) throw py::value_error(fmt::format("Model: the Dist already has a model for rank {}", rank));
    if (w.ran) throw py::value_error("Model: this Dist has already run; make a new Dist");
    // The stores keep their layer keys in arenas shared by the ranks, as run_strategy's do.
    if (!w.arenas) {
        w.arenas = std::make_unique<puzzle::StoreArenas>(w.ranks(), layers);
        w.arena_layers = layers;
    }
    const puzzle::StoreArenas* arenas = w.arena_layers == layers ? w.arenas.get() : nullptr;
    slot = std::make_unique<Model>(w.sim.gpu(rank), layers, batches, puzzle::puzzle_costs(), arenas);
    return *slot;
}

// The trace of everything the Dist's models did (taken once; later calls give the same).
const Trace& world_trace(World& w, const py::dict& meta) {
    if (!w.trace) {
        Trace t;
        const auto& costs = puzzle::puzzle_costs();
        t.time_unit = costs.time_unit();
        t.memory_unit = costs.memory_unit();
        t.meta = nlohmann::json::parse(py::module_::import("json").attr("dumps")(meta).cast<std::string>());
        SummaryFold fold;
        for (int r = 0; r < w.ranks(); ++r) fold.add_rank(r, w.sim.gpu(r).summary());
        t.summary = fold.summary;
        t.ranks = w.sim.take_logs();
        std::vector<const Model*> ms;
        for (const auto& m : w.models)
            if (m) ms.push_back(m.get());
        int layers = 0;
        for (const Model* m : ms) layers = std::max(layers, m->LAYERS);
        if (!ms.empty()) t.summary.correct = !puzzle::check_final_weights(layers, ms).has_value();
        w.trace = std::move(t);
    }
    return *w.trace;
}

std::string trace_json(const Trace& t) {
    std::ostringstream out;
    write_trace_json(t, out);
    return out.str();
}

std::string trace_svg(const Trace& t, const std::string& ranks, int width) {
    std::ostringstream out;
    render::Options o;
    o.ranks = ranks;
    o.width = width;
    render::write_image(t, out, render::Format::svg, o);
    return out.str();
}

py::list trace_records(const Trace& t) {
    py::list out;
    for (const RankTrace& r : t.ranks)
        for (const Event& e : r.events) {
            py::dict d;
            d["rank"] = r.rank;
            d["op"] = std::string(e.op.name());
            d["layer"] = e.layer == kNoLayer ? py::object(py::none()) : py::object(py::int_(e.layer));
            d["start"] = e.start;
            d["duration"] = e.duration;
            d["memory"] = e.memory;
            py::list b;
            e.batches.for_each([&](std::int64_t v) { b.append(v); });
            d["batches"] = b;
            out.append(d);
        }
    return out;
}

Request make_request(const py::object& self, RequestOp op, py::object value, int layer, int dst) {
    auto& m = self.cast<PyModel&>();
    Request r;
    r.owner_ref = self;
    r.op = op;
    r.layer = layer;
    r.dst = dst;
    r.value = std::move(value);
    r.owner = &m;
    r.model = m.model;
    return r;
}

template <class A, class B>
py::tuple pair(std::pair<A, B>&& p) {
    return py::make_tuple(std::move(p.first), std::move(p.second));
}

}  // namespace
}  // namespace dtsim::python

PYBIND11_MODULE(_core, m) {
    using namespace dtsim;
    using namespace dtsim::python;
    m.doc() = "dtsim's engine for Python: the puzzle world (see dtsim.puzzles)";

    // Errors: the engine's exceptions under their own names, with the engine's messages.
    static py::exception<ScheduleError> schedule_error(m, "ScheduleError", PyExc_RuntimeError);
    static py::exception<PuzzleError> puzzle_error(m, "PuzzleError", schedule_error.ptr());
    static py::exception<DeadlockError> deadlock_error(m, "DeadlockError", schedule_error.ptr());
    static py::exception<CollectiveMismatchError> mismatch_error(m, "CollectiveMismatchError", schedule_error.ptr());
    py::register_exception_translator([](std::exception_ptr p) {
        try {
            if (p) std::rethrow_exception(p);
        } catch (const PuzzleError& e) {
            PyErr_SetString(puzzle_error.ptr(), e.what());
        } catch (const DeadlockError& e) {
            PyErr_SetString(deadlock_error.ptr(), e.what());
        } catch (const CollectiveMismatchError& e) {
            PyErr_SetString(mismatch_error.ptr(), e.what());
        } catch (const ScheduleError& e) {
            PyErr_SetString(schedule_error.ptr(), e.what());
        }
    });

    using puzzle::Activation;
    using puzzle::ActivationGrad;
    using puzzle::OptState;
    using puzzle::Weight;
    using puzzle::WeightGrad;
    const auto one = py::frozenset(py::make_tuple(0));

    py::class_<Weight>(m, "Weight")
        .def(py::init([](int layer, int step, const py::object& shards, int total) {
                 return Weight{layer, step, to_ids(shards), total};
             }),
             py::arg("layer"), py::arg("step"), py::arg("shards") = one, py::arg("total") = 1)
        .def_readonly("layer", &Weight::layer)
        .def_readonly("step", &Weight::step)
        .def_property_readonly("shards", [](const Weight& v) { return to_frozenset(v.shards); })
        .def_readonly("total", &Weight::total)
        .def("is_complete", &Weight::is_complete)
        .def("combine", &Weight::combine)
        .def("shard", &Weight::shard)
        .def("__repr__", &Weight::str);
    py::class_<OptState>(m, "OptState")
        .def(py::init([](int layer, int step, const py::object& shards, int total) {
                 return OptState{layer, step, to_ids(shards), total};
             }),
             py::arg("layer"), py::arg("step"), py::arg("shards") = one, py::arg("total") = 1)
        .def_readonly("layer", &OptState::layer)
        .def_readonly("step", &OptState::step)
        .def_property_readonly("shards", [](const OptState& v) { return to_frozenset(v.shards); })
        .def_readonly("total", &OptState::total)
        .def("is_complete", &OptState::is_complete)
        .def("combine", &OptState::combine)
        .def("shard", &OptState::shard)
        .def("__repr__", &OptState::str);
    py::class_<Activation>(m, "Activation")
        .def(py::init([](int layer, const py::object& batches) { return Activation{layer, to_ids(batches)}; }),
             py::arg("layer"), py::arg("batches"))
        .def_readonly("layer", &Activation::layer)
        .def_property_readonly("batches", [](const Activation& v) { return to_frozenset(v.batches); })
        .def("__repr__", &Activation::str);
    py::class_<ActivationGrad>(m, "ActivationGrad")
        .def(py::init([](int layer, const py::object& batches) { return ActivationGrad{layer, to_ids(batches)}; }),
             py::arg("layer"), py::arg("batches"))
        .def_readonly("layer", &ActivationGrad::layer)
        .def_property_readonly("batches", [](const ActivationGrad& v) { return to_frozenset(v.batches); })
        .def("__repr__", &ActivationGrad::str);
    py::class_<WeightGrad>(m, "WeightGrad")
        // The reference library's form, as the notebook writes it: WeightGrad(0, 1, {i}, ranks),
        // WeightGrad(0, 1, batches={1}, total_batches=4, shards={1}, total=4). The model's layer count
        // and the batch count are not part of dtsim's value (they are the run's).
        .def(py::init([](int layer, int /*layers*/, const py::object& batches, int /*total_batches*/,
                         const py::object& shards, int total) {
                 return WeightGrad{layer, to_ids(batches), to_ids(shards), total};
             }),
             py::arg("layer"), py::arg("layers"), py::arg("batches"), py::arg("total_batches"), py::arg("shards") = one,
             py::arg("total") = 1)
        .def(py::init([](int layer, const py::object& batches, const py::object& shards, int total) {
                 return WeightGrad{layer, to_ids(batches), to_ids(shards), total};
             }),
             py::arg("layer"), py::arg("batches"), py::arg("shards") = one, py::arg("total") = 1)
        .def_readonly("layer", &WeightGrad::layer)
        .def_property_readonly("batches", [](const WeightGrad& v) { return to_frozenset(v.batches); })
        .def_property_readonly("shards", [](const WeightGrad& v) { return to_frozenset(v.shards); })
        .def_readonly("total", &WeightGrad::total)
        .def("is_complete", &WeightGrad::is_complete)
        .def("combine", &WeightGrad::combine)
        .def("shard", &WeightGrad::shard)
        .def("__add__", [](const WeightGrad& a, const WeightGrad& b) { return a + b; })
        .def("__repr__", &WeightGrad::str);


    py::class_<Request>(m, "Request")
        .def("__repr__", [](const Request& r) {
            return fmt::format("<dtsim request {} (rank {})>", request_name(r.op), r.model->rank);
        });

    py::class_<PyDist>(m, "Dist")
        .def(py::init<int>(), py::arg("ranks"))
        .def_property_readonly("ranks", [](const PyDist& d) { return d.world->ranks(); })
        .def("_run", &run_world)
        .def("_trace_json", [](PyDist& d, const py::dict& meta) { return trace_json(world_trace(*d.world, meta)); })
        .def("_trace_records", [](PyDist& d, const py::dict& meta) { return trace_records(world_trace(*d.world, meta)); })
        .def("_trace_svg", [](PyDist& d, const py::dict& meta, const std::string& ranks, int width) {
            return trace_svg(world_trace(*d.world, meta), ranks, width);
        })
        .def("_summary", [](PyDist& d, const py::dict& meta) {
            const Summary& s = world_trace(*d.world, meta).summary;
            py::dict out;
            out["timesteps"] = s.timesteps;
            out["makespan"] = s.makespan;
            out["max_memory"] = s.max_memory;
            out["max_memory_rank"] = s.max_memory_rank;
            out["max_memory_time"] = s.max_memory_time;
            out["correct"] = s.correct ? py::object(py::bool_(*s.correct)) : py::object(py::none());
            return out;
        });

    py::class_<PyModel>(m, "Model", py::dynamic_attr())
        .def(py::init([](int layers, int batches, int rank, PyDist& dist) {
                 Model& model = make_model(dist, layers, batches, rank);
                 return PyModel{dist.world, &model, py::list()};
             }),
             py::arg("layers"), py::arg("batches"), py::arg("rank"), py::arg("dist"))
        .def_property_readonly("_rank", [](const PyModel& p) { return p.model->rank; })
        .def_property_readonly("_RANKS", [](const PyModel& p) { return p.model->RANKS; })
        .def_property_readonly("_LAYERS", [](const PyModel& p) { return p.model->LAYERS; })
        .def_property_readonly("_BATCHES", [](const PyModel& p) { return p.model->BATCHES; })
        .def_property_readonly("_pending", [](const PyModel& p) { return p.pending; })
        .def("memory", [](PyModel& p) { return p.flushed().memory(); })
        .def_property_readonly("time", [](const PyModel& p) { return p.model->time(); })
        .def(
            "load_weights",
            [](PyModel& p, int layer, int shard, int total) { return pair(p.flushed().load_weights(layer, shard, total)); },
            py::arg("layer"), py::arg("shard") = 0, py::arg("total") = 1)
        .def("get_activation", [](PyModel& p, const py::object& batches) { return p.flushed().get_activation(to_ids(batches)); },
             py::arg("batches"))
        .def("forward", [](PyModel& p, int layer, const Activation& a, const Weight& w) { return p.flushed().forward(layer, a, w); },
             py::arg("layer"), py::arg("inp"), py::arg("weight"))
        .def("backward",
             [](PyModel& p, int layer, const Activation& a, const ActivationGrad& g, const Weight& w) {
                 return pair(p.flushed().backward(layer, a, g, w));
             },
             py::arg("layer"), py::arg("inp"), py::arg("grad"), py::arg("weight"))
        .def("loss", [](PyModel& p, const Activation& a) { return p.flushed().loss(a); }, py::arg("inp"))
        .def("update",
             // (The reference takes a shard and does not use it.)
             [](PyModel& p, int layer, const WeightGrad& g, const Weight& w, const OptState& o, int) {
                 return pair(p.flushed().update(layer, g, w, o));
             },
             py::arg("layer"), py::arg("weight_grad"), py::arg("weight"), py::arg("opt_state"), py::arg("shard") = 0)
        .def("fake_grad", [](PyModel& p, int layer, const py::object& batches) { return p.flushed().fake_grad(layer, to_ids(batches)); },
             py::arg("layer"), py::arg("batches"))
        .def("set_final_weight", [](PyModel& p, int layer, const Weight& w) { p.flushed().set_final_weight(layer, w); },
             py::arg("layer"), py::arg("weight"))
        .def_property_readonly("final_weights",
                               [](const PyModel& p) {
                                   py::dict out;
                                   for (int l = 0; l < p.model->LAYERS; ++l)
                                       if (const Weight* w = p.model->final_weight(l)) out[py::int_(l)] = *w;
                                   return out;
                               })
        .def("allreduce", [](const py::object& p, py::object v, int layer) { return make_request(p, RequestOp::allreduce, std::move(v), layer, -1); },
             py::arg("v"), py::arg("layer"))
        .def("allgather", [](const py::object& p, py::object v, int layer) { return make_request(p, RequestOp::allgather, std::move(v), layer, -1); },
             py::arg("v"), py::arg("layer"))
        .def("scatterreduce", [](const py::object& p, py::object v, int layer) { return make_request(p, RequestOp::scatterreduce, std::move(v), layer, -1); },
             py::arg("v"), py::arg("layer"))
        .def("pass_to", [](const py::object& p, int dst, py::object v) { return make_request(p, RequestOp::pass_to, std::move(v), kNoLayer, dst); },
             py::arg("rank"), py::arg("v"))
        .def("receive", [](const py::object& p) { return make_request(p, RequestOp::receive, py::none(), kNoLayer, -1); })
        ;

    // The reference's Model.check over the given models: the first failure, or None.
    m.def("check_models", [](const py::list& models) {
        std::vector<const puzzle::Model*> ms;
        int layers = 0;
        for (const py::handle h : models) {
            const auto& pm = h.cast<const PyModel&>();
            ms.push_back(pm.model);
            layers = std::max(layers, pm.model->LAYERS);
        }
        return puzzle::check_final_weights(layers, ms);
    });

    // The C++ ports of the seed's solutions, for comparison: the trace of
    // run_strategy as `dtsim puzzle NAME --trace` writes it, and the puzzles' sizes and targets.
    m.def("run_builtin", [](const std::string& name, int layers, int batches, int ranks) {
        const puzzle::PuzzleInfo* p = puzzle::find_puzzle(name);
        if (!p) throw py::value_error(fmt::format("unknown puzzle '{}'", name));
        const RunResult r = puzzle::run_strategy(p->strategy, layers, batches, ranks, puzzle::puzzle_costs(),
                                                 {{"puzzle", p->name}});
        return trace_json(r.trace);
    });
    // The same run without writing the trace out: the number of events (for benchmarks).
    m.def("run_builtin_events", [](const std::string& name, int layers, int batches, int ranks) {
        const puzzle::PuzzleInfo* p = puzzle::find_puzzle(name);
        if (!p) throw py::value_error(fmt::format("unknown puzzle '{}'", name));
        return puzzle::run_strategy(p->strategy, layers, batches, ranks).events;
    });
    m.def("builtin_puzzles", [] {
        py::dict out;
        for (const auto& p : puzzle::puzzles()) {
            py::dict d;
            d["layers"] = p.layers;
            d["batches"] = p.batches;
            d["ranks"] = p.ranks;
            d["target_steps"] = p.target_steps;
            d["target_memory"] = p.target_memory;
            d["title"] = p.title;
            out[py::str(p.name)] = d;
        }
        return out;
    });
}
