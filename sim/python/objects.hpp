// The puzzle world's Python objects as types of the C API: the values, the
// stores, the models and the requests a rank's coroutine awaits. A strategy
// touches them in every line (a store write, an operation, an await), so they
// are made without pybind11's generic machinery: a value is one small
// allocation holding the C++ value, a store is a dict whose writes go straight
// to the engine's store, and an operation is a fast call that parses its
// arguments itself. The module (bindings.cpp) adds them with add_objects.
#pragma once

#include "dtsim/puzzle/model.hpp"
#include "dtsim/simulation.hpp"
#include "dtsim/trace.hpp"

#include <pybind11/pybind11.h>

#include <memory>
#include <optional>
#include <type_traits>
#include <utility>
#include <vector>

namespace dtsim::python {

namespace py = pybind11;

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
    std::vector<std::unique_ptr<puzzle::Model>> models;
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
    explicit PyDist(int ranks);
    std::shared_ptr<World> world;
};

// The engine's exceptions as Python classes (the module's ScheduleError and its subclasses).
struct ErrorTypes {
    PyObject* schedule = nullptr;
    PyObject* puzzle = nullptr;
    PyObject* deadlock = nullptr;
    PyObject* mismatch = nullptr;
};
inline ErrorTypes error_types;

// In a catch block: sets the Python error for the exception being handled,
// as pybind11 translates the exceptions of the functions it binds.
void set_python_error() noexcept;

// ------------------------------------------------------------------ values

// A value object: the C++ value inside the Python object.
template <class V>
struct ValueObject {
    PyObject_HEAD
    V value;
};

template <class V>
inline PyTypeObject* value_type = nullptr;

// The value in `o`, or null when `o` is not a V.
template <class V>
V* unwrap(PyObject* o) {
    return Py_TYPE(o) == value_type<V> ? &reinterpret_cast<ValueObject<V>*>(o)->value : nullptr;
}

// A new value object holding `v` (a new reference; null with MemoryError set).
template <class V>
PyObject* wrap(V&& v) {
    using T = std::remove_cvref_t<V>;
    auto* o = PyObject_New(ValueObject<T>, value_type<T>);
    if (o) new (&o->value) T(std::forward<V>(v));
    return reinterpret_cast<PyObject*>(o);
}

// The same, owned, throwing py::error_already_set when it cannot be made.
template <class V>
py::object wrap_object(V&& v) {
    PyObject* o = wrap(std::forward<V>(v));
    if (!o) throw py::error_already_set();
    return py::reinterpret_steal<py::object>(o);
}

// ------------------------------------------------------------------ models

// dtsim._core.Model, the base of dtsim.puzzles.Model: the world it lives in,
// kept alive, and the engine's model of its rank (null until __init__).
struct ModelObject {
    PyObject_HEAD
    std::shared_ptr<World> world;
    puzzle::Model* model;
};
inline PyTypeObject* model_type = nullptr;

// The engine's model of a dtsim.puzzles.Model; throws py::type_error for anything else.
puzzle::Model& model_of(PyObject* o);

// ------------------------------------------------------------------ requests

// What awaiting a collective or a pass yields to the driver: the operation and
// its arguments. Awaiting a request yields the request itself; the driver
// awaits the operation and sends the result back into the coroutine, where it
// is the value of the `await`.
enum class RequestOp { allreduce, allgather, scatterreduce, pass_to, receive };

constexpr const char* request_name(RequestOp op) {
    switch (op) {
        case RequestOp::allreduce: return "allreduce";
        case RequestOp::allgather: return "allgather";
        case RequestOp::scatterreduce: return "scatterreduce";
        case RequestOp::pass_to: return "pass_to";
        case RequestOp::receive: return "receive";
    }
    return "?";
}

struct RequestObject {
    PyObject_HEAD
    RequestOp op;
    int layer;  // collectives
    int dst;    // pass_to
    bool yielded;           // the current await has yielded the request (the next send ends it)
    PyObject* value;        // what is reduced, gathered or passed (None for receive)
    ModelObject* owner;     // the model it was made from, kept alive while it waits
};
inline PyTypeObject* request_type = nullptr;

// Creates the types above and adds them to the module.
void add_objects(py::module_& m);

}  // namespace dtsim::python
