// dtsim._core: the puzzle world for Python (docs/python.md). The values, the
// five stores with Python's mapping protocol and a Model per rank bound to a
// Dist (one Simulation) are in objects.cpp; here are the Dist, the driver that
// runs each rank's Python coroutine on the engine (a C++ Task per rank sends
// into the coroutine, and every operation it awaits, a Request, is awaited by
// that Task on the model, parking the rank exactly as a C++ strategy's
// co_await does), the traces and the module.
#include "objects.hpp"

#include "dtsim/puzzle/model.hpp"
#include "dtsim/puzzle/registry.hpp"
#include "dtsim/puzzle/run.hpp"
#include "dtsim/render.hpp"
#include "dtsim/trace_io.hpp"

#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <fmt/format.h>

#include <algorithm>
#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace dtsim::python {
namespace {

using puzzle::Activation;
using puzzle::ActivationGrad;
using puzzle::Model;
using puzzle::OptState;
using puzzle::Weight;
using puzzle::WeightGrad;

// ------------------------------------------------------------------ the driver

// A rank's Python coroutine raised: the exception is kept in the world and
// re-raised by run() as it was raised (this marks the rank's Task as failed).
struct PythonRaised : std::runtime_error {
    using std::runtime_error::runtime_error;
};

py::object received_value(const puzzle::Received& r) {
    // Passed values are the puzzle's value types or Python objects; try each.
    try { return wrap_object(r.as<Activation>()); } catch (const PuzzleError&) {}
    try { return wrap_object(r.as<ActivationGrad>()); } catch (const PuzzleError&) {}
    try { return r.as<py::object>(); } catch (const PuzzleError&) {}
    try { return wrap_object(r.as<WeightGrad>()); } catch (const PuzzleError&) {}
    try { return wrap_object(r.as<Weight>()); } catch (const PuzzleError&) {}
    return wrap_object(r.as<OptState>());
}

Task<> nothing() { co_return; }

// Steps `coro` (rank `model.rank`'s coroutine) until it returns, awaiting on
// the model each operation it yields; its return value goes to `*result`.
// The request, held in `yielded`, keeps the value an operation reads alive
// while the rank waits. (The model's operations checked the values' types.)
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
        if (Py_TYPE(out) != request_type)
            throw PuzzleError(model.rank, "await", kNoLayer,
                              fmt::format("the coroutine awaited {}, which is not a dtsim operation (only the "
                                          "model's allreduce, allgather, scatterreduce, pass_to and receive can "
                                          "be awaited on the engine; asyncio's own awaitables need its event loop)",
                                          py::repr(yielded).cast<std::string>()));
        const auto& req = *reinterpret_cast<const RequestObject*>(out);
        if (req.owner->model != &model)
            throw PuzzleError(model.rank, request_name(req.op), req.layer,
                              fmt::format("awaited an operation of rank {}'s model", req.owner->model->rank));
        PyObject* v = req.value;
        switch (req.op) {
            case RequestOp::allreduce:
                send = wrap_object(co_await model.allreduce(*unwrap<WeightGrad>(v), req.layer));
                break;
            case RequestOp::scatterreduce:
                send = wrap_object(co_await model.scatterreduce(*unwrap<WeightGrad>(v), req.layer));
                break;
            case RequestOp::allgather:
                if (const Weight* w = unwrap<Weight>(v))
                    send = wrap_object(co_await model.allgather(*w, req.layer));
                else if (const OptState* o = unwrap<OptState>(v))
                    send = wrap_object(co_await model.allgather(*o, req.layer));
                else
                    send = wrap_object(co_await model.allgather(*unwrap<WeightGrad>(v), req.layer));
                break;
            case RequestOp::pass_to:
                if (const Activation* a = unwrap<Activation>(v))
                    co_await model.pass_to(req.dst, *a);
                else if (const ActivationGrad* g = unwrap<ActivationGrad>(v))
                    co_await model.pass_to(req.dst, *g);
                else if (const WeightGrad* wg = unwrap<WeightGrad>(v))
                    co_await model.pass_to(req.dst, *wg);
                else if (const Weight* w = unwrap<Weight>(v))
                    co_await model.pass_to(req.dst, *w);
                else if (const OptState* o = unwrap<OptState>(v))
                    co_await model.pass_to(req.dst, *o);
                else
                    co_await model.pass_to(req.dst, py::reinterpret_borrow<py::object>(v));
                send = py::none();
                break;
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
        const Model& model = model_of(pair[0].ptr());
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

// ------------------------------------------------------------------ traces

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
    error_types = {schedule_error.ptr(), puzzle_error.ptr(), deadlock_error.ptr(), mismatch_error.ptr()};
    py::register_exception_translator([](std::exception_ptr p) {
        try {
            if (p) std::rethrow_exception(p);
        } catch (const ScheduleError&) {
            set_python_error();
        }
    });

    add_objects(m);

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

    // The reference's Model.check over the given models: the first failure, or None.
    m.def("check_models", [](const py::list& models) {
        std::vector<const puzzle::Model*> ms;
        int layers = 0;
        for (const py::handle h : models) {
            const Model& model = model_of(h.ptr());
            ms.push_back(&model);
            layers = std::max(layers, model.LAYERS);
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
