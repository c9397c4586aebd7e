// The puzzle world's Python objects (objects.hpp) with the C API.
#include "objects.hpp"

#include <fmt/format.h>

#include <array>
#include <climits>
#include <cstddef>
#include <new>
#include <stdexcept>
#include <string>

namespace dtsim::python {

using puzzle::Activation;
using puzzle::ActivationGrad;
using puzzle::Key;
using puzzle::Model;
using puzzle::OptState;
using puzzle::Weight;
using puzzle::WeightGrad;

PyDist::PyDist(int ranks) {
    if (ranks < 1) throw py::value_error(fmt::format("Dist: ranks must be at least 1 (got {})", ranks));
    world = std::make_shared<World>(ranks);
}

void set_python_error() noexcept {
    // The engine's errors under the module's names; the others as pybind11's
    // default translator maps them.
    try {
        throw;
    } catch (py::error_already_set& e) {
        e.restore();
    } catch (const py::builtin_exception& e) {
        e.set_error();
    } catch (const PuzzleError& e) {
        PyErr_SetString(error_types.puzzle, e.what());
    } catch (const DeadlockError& e) {
        PyErr_SetString(error_types.deadlock, e.what());
    } catch (const CollectiveMismatchError& e) {
        PyErr_SetString(error_types.mismatch, e.what());
    } catch (const ScheduleError& e) {
        PyErr_SetString(error_types.schedule, e.what());
    } catch (const std::bad_alloc&) {
        PyErr_NoMemory();
    } catch (const std::domain_error& e) {
        PyErr_SetString(PyExc_ValueError, e.what());
    } catch (const std::invalid_argument& e) {
        PyErr_SetString(PyExc_ValueError, e.what());
    } catch (const std::length_error& e) {
        PyErr_SetString(PyExc_ValueError, e.what());
    } catch (const std::out_of_range& e) {
        PyErr_SetString(PyExc_IndexError, e.what());
    } catch (const std::range_error& e) {
        PyErr_SetString(PyExc_ValueError, e.what());
    } catch (const std::overflow_error& e) {
        PyErr_SetString(PyExc_OverflowError, e.what());
    } catch (const std::exception& e) {
        PyErr_SetString(PyExc_RuntimeError, e.what());
    } catch (...) {
        PyErr_SetString(PyExc_RuntimeError, "Caught an unknown exception!");
    }
}

namespace {

// ------------------------------------------------------------------ helpers

// Runs `f`, which returns a new reference or null with the error set; a C++
// exception it throws becomes the Python error, and null is returned.
template <class F>
PyObject* guarded(F&& f) noexcept {
    try {
        return f();
    } catch (...) {
        set_python_error();
        return nullptr;
    }
}

PyObject* to_str(const std::string& s) { return PyUnicode_FromStringAndSize(s.data(), static_cast<Py_ssize_t>(s.size())); }

// The name of an object's type as Python shows it (`type(o).__name__`), for messages.
std::string type_name(PyObject* o) {
    const auto name = py::reinterpret_steal<py::object>(PyObject_GetAttrString(reinterpret_cast<PyObject*>(Py_TYPE(o)), "__name__"));
    if (!name || !PyUnicode_Check(name.ptr())) {
        PyErr_Clear();
        return Py_TYPE(o)->tp_name;
    }
    return PyUnicode_AsUTF8(name.ptr());
}

// A C function of any of the method signatures, as a PyMethodDef holds it
// (through a function type that -Wcast-function-type lets a cast go through).
template <class F>
PyCFunction method(F* f) {
    return reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(f));
}

template <class F>
void* slot(F* f) {
    return reinterpret_cast<void*>(f);
}

// The arguments of a METH_FASTCALL | METH_KEYWORDS method by parameter,
// positional or by keyword as pybind11 takes them: the first `required` are
// needed; those not given are null.
template <std::size_t N>
struct Params {
    const char* function;
    std::array<const char*, N> names;
    std::size_t required;

    bool parse(PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames, std::array<PyObject*, N>& out) const {
        out.fill(nullptr);
        if (static_cast<std::size_t>(nargs) > N) {
            PyErr_Format(PyExc_TypeError, "%s() takes at most %zu arguments (%zd given)", function, N, nargs);
            return false;
        }
        for (Py_ssize_t i = 0; i < nargs; ++i) out[static_cast<std::size_t>(i)] = args[i];
        if (kwnames) {
            const Py_ssize_t n = PyTuple_GET_SIZE(kwnames);
            for (Py_ssize_t k = 0; k < n; ++k) {
                PyObject* name = PyTuple_GET_ITEM(kwnames, k);
                std::size_t i = 0;
                while (i < N && PyUnicode_CompareWithASCIIString(name, names[i]) != 0) ++i;
                if (i == N) {
                    PyErr_Format(PyExc_TypeError, "%s() got an unexpected keyword argument '%U'", function, name);
                    return false;
                }
                if (out[i]) {
                    PyErr_Format(PyExc_TypeError, "%s() got multiple values for argument '%s'", function, names[i]);
                    return false;
                }
                out[i] = args[nargs + k];
            }
        }
        for (std::size_t i = 0; i < required; ++i)
            if (!out[i]) {
                PyErr_Format(PyExc_TypeError, "%s() missing required argument '%s'", function, names[i]);
                return false;
            }
        return true;
    }

    // Argument i as an int (an int or what has __index__, not a float, as
    // pybind11 takes it); left as it is when not given.
    bool int_arg(const std::array<PyObject*, N>& a, std::size_t i, int& out) const {
        PyObject* o = a[i];
        if (!o) return true;
        if (!PyLong_Check(o) && (PyFloat_Check(o) || !PyIndex_Check(o))) {
            PyErr_Format(PyExc_TypeError, "%s(): %s must be an int, not %s", function, names[i], type_name(o).c_str());
            return false;
        }
        int overflow = 0;
        const long v = PyLong_AsLongAndOverflow(o, &overflow);
        if (v == -1 && PyErr_Occurred()) return false;
        if (overflow || v < INT_MIN || v > INT_MAX) {
            PyErr_Format(PyExc_OverflowError, "%s(): %s does not fit in an int", function, names[i]);
            return false;
        }
        out = static_cast<int>(v);
        return true;
    }
};

// ------------------------------------------------------------------ id sets

// A batch or shard set from any iterable of ints (range, list, set, frozenset).
bool to_ids(PyObject* o, IdSet& out) {
    PyObject* it = PyObject_GetIter(o);
    if (!it) return false;
    while (PyObject* item = PyIter_Next(it)) {
        const long long v = PyLong_AsLongLong(item);
        Py_DECREF(item);
        if (v == -1 && PyErr_Occurred()) {
            Py_DECREF(it);
            return false;
        }
        out.insert(v);
    }
    Py_DECREF(it);
    return !PyErr_Occurred();
}

PyObject* to_frozenset(const IdSet& ids) {
    PyObject* s = PyFrozenSet_New(nullptr);
    if (!s) return nullptr;
    bool ok = true;
    ids.for_each([&](std::int64_t v) {
        if (!ok) return;
        PyObject* i = PyLong_FromLongLong(v);
        ok = i && PySet_Add(s, i) == 0;
        Py_XDECREF(i);
    });
    if (!ok) Py_CLEAR(s);
    return s;
}

// ------------------------------------------------------------------ values

template <class V>
constexpr const char* value_name();
template <>
constexpr const char* value_name<Weight>() { return "Weight"; }
template <>
constexpr const char* value_name<OptState>() { return "OptState"; }
template <>
constexpr const char* value_name<Activation>() { return "Activation"; }
template <>
constexpr const char* value_name<ActivationGrad>() { return "ActivationGrad"; }
template <>
constexpr const char* value_name<WeightGrad>() { return "WeightGrad"; }

// With its article, for messages.
template <class V>
constexpr const char* a_value_name() {
    if constexpr (std::is_same_v<V, Weight>) return "a Weight";
    if constexpr (std::is_same_v<V, OptState>) return "an OptState";
    if constexpr (std::is_same_v<V, Activation>) return "an Activation";
    if constexpr (std::is_same_v<V, ActivationGrad>) return "an ActivationGrad";
    return "a WeightGrad";
}

template <class V>
const V& value_of(PyObject* self) {
    return reinterpret_cast<ValueObject<V>*>(self)->value;
}

// Argument `name` of `function`, which must be a V.
template <class V>
const V* value_arg(PyObject* o, const char* function, const char* name) {
    if (const V* v = unwrap<V>(o)) return v;
    PyErr_Format(PyExc_TypeError, "%s(): %s must be %s, not %s", function, name, a_value_name<V>(), type_name(o).c_str());
    return nullptr;
}

template <class A, class B>
PyObject* pair(std::pair<A, B>&& p) {
    PyObject* a = wrap(std::move(p.first));
    PyObject* b = a ? wrap(std::move(p.second)) : nullptr;
    PyObject* t = b ? PyTuple_New(2) : nullptr;
    if (!t) {
        Py_XDECREF(a);
        Py_XDECREF(b);
        return nullptr;
    }
    PyTuple_SET_ITEM(t, 0, a);
    PyTuple_SET_ITEM(t, 1, b);
    return t;
}

template <class V>
void value_dealloc(PyObject* self) {
    PyTypeObject* type = Py_TYPE(self);
    reinterpret_cast<ValueObject<V>*>(self)->value.~V();
    type->tp_free(self);
    Py_DECREF(type);
}

template <class V>
PyObject* value_repr(PyObject* self) {
    return guarded([&] { return to_str(value_of<V>(self).str()); });
}

template <class V, auto member>
PyObject* get_int(PyObject* self, void*) {
    return PyLong_FromLong(value_of<V>(self).*member);
}

template <class V, auto member>
PyObject* get_ids(PyObject* self, void*) {
    return guarded([&] { return to_frozenset(value_of<V>(self).*member); });
}

template <class V>
PyObject* is_complete(PyObject* self, PyObject*) {
    return PyBool_FromLong(value_of<V>(self).is_complete());
}

template <class V>
PyObject* combine(PyObject* self, PyObject* other) {
    const V* o = value_arg<V>(other, "combine", "other");
    if (!o) return nullptr;
    return guarded([&] { return wrap(value_of<V>(self).combine(*o)); });
}

template <class V>
PyObject* shard(PyObject* self, PyObject* const* args, Py_ssize_t nargs) {
    static constexpr Params<2> p{"shard", {"s", "n"}, 2};
    std::array<PyObject*, 2> a{};
    int s = 0;
    int n = 0;
    if (!p.parse(args, nargs, nullptr, a) || !p.int_arg(a, 0, s) || !p.int_arg(a, 1, n)) return nullptr;
    return guarded([&] { return wrap(value_of<V>(self).shard(s, n)); });
}

// The constructors take what the reference's constructors take (and pybind11's did).
template <class V>
PyObject* sharded_new(PyTypeObject*, PyObject* args, PyObject* kwds) {  // Weight, OptState
    static const char* kw[] = {"layer", "step", "shards", "total", nullptr};
    int layer = 0;
    int step = 0;
    PyObject* shards = nullptr;
    int total = 1;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "ii|Oi", const_cast<char**>(kw), &layer, &step, &shards, &total))
        return nullptr;
    return guarded([&]() -> PyObject* {
        V v{layer, step, IdSet::single(0), total};
        if (shards) {
            v.shards = IdSet();
            if (!to_ids(shards, v.shards)) return nullptr;
        }
        return wrap(std::move(v));
    });
}

template <class V>
PyObject* batched_new(PyTypeObject*, PyObject* args, PyObject* kwds) {  // Activation, ActivationGrad
    static const char* kw[] = {"layer", "batches", nullptr};
    int layer = 0;
    PyObject* batches = nullptr;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "iO", const_cast<char**>(kw), &layer, &batches)) return nullptr;
    return guarded([&]() -> PyObject* {
        V v{layer, IdSet()};
        if (!to_ids(batches, v.batches)) return nullptr;
        return wrap(std::move(v));
    });
}

PyObject* weight_grad_new(PyTypeObject*, PyObject* args, PyObject* kwds) {
    // The reference library's form, as the notebook writes it: WeightGrad(0, 1, {i}, ranks),
    // WeightGrad(0, 1, batches={1}, total_batches=4, shards={1}, total=4). The model's layer count
    // and the batch count are not part of dtsim's value (they are the run's). Else dtsim's form,
    // WeightGrad(layer, batches, shards={0}, total=1).
    static const char* reference[] = {"layer", "layers", "batches", "total_batches", "shards", "total", nullptr};
    static const char* own[] = {"layer", "batches", "shards", "total", nullptr};
    int layer = 0;
    int layers = 0;
    int total_batches = 0;
    PyObject* batches = nullptr;
    PyObject* shards = nullptr;
    int total = 1;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "iiOi|Oi", const_cast<char**>(reference), &layer, &layers, &batches,
                                     &total_batches, &shards, &total)) {
        if (!PyErr_ExceptionMatches(PyExc_TypeError)) return nullptr;
        PyErr_Clear();
        layer = 0;
        batches = nullptr;
        shards = nullptr;
        total = 1;
        if (!PyArg_ParseTupleAndKeywords(args, kwds, "iO|Oi", const_cast<char**>(own), &layer, &batches, &shards, &total)) {
            if (!PyErr_ExceptionMatches(PyExc_TypeError)) return nullptr;
            PyErr_SetString(PyExc_TypeError,
                            "WeightGrad() takes (layer, layers, batches, total_batches, shards={0}, total=1), "
                            "the reference's form, or (layer, batches, shards={0}, total=1)");
            return nullptr;
        }
    }
    return guarded([&]() -> PyObject* {
        WeightGrad g{layer, IdSet(), IdSet::single(0), total};
        if (!to_ids(batches, g.batches)) return nullptr;
        if (shards) {
            g.shards = IdSet();
            if (!to_ids(shards, g.shards)) return nullptr;
        }
        return wrap(std::move(g));
    });
}

PyObject* weight_grad_add(PyObject* a, PyObject* b) {
    const WeightGrad* x = unwrap<WeightGrad>(a);
    const WeightGrad* y = unwrap<WeightGrad>(b);
    if (!x || !y) Py_RETURN_NOTIMPLEMENTED;
    return guarded([&] { return wrap(*x + *y); });
}

// The methods and attributes of each value type.
template <class V>
struct ValueSpec;

template <class V>
struct ShardedSpec {  // Weight, OptState
    static inline PyGetSetDef getset[] = {
        {"layer", &get_int<V, &V::layer>, nullptr, nullptr, nullptr},
        {"step", &get_int<V, &V::step>, nullptr, nullptr, nullptr},
        {"shards", &get_ids<V, &V::shards>, nullptr, "a frozenset of the shard ids held", nullptr},
        {"total", &get_int<V, &V::total>, nullptr, "the number of shards the layer is cut into", nullptr},
        {nullptr, nullptr, nullptr, nullptr, nullptr},
    };
    static inline PyMethodDef methods[] = {
        {"is_complete", method(&is_complete<V>), METH_NOARGS, "every shard is held"},
        {"combine", method(&combine<V>), METH_O, "the union of the shards of two parts of the same layer"},
        {"shard", method(&shard<V>), METH_FASTCALL, "shard(s, n): shard s of n of a complete value"},
        {nullptr, nullptr, 0, nullptr},
    };
    static inline newfunc tp_new = &sharded_new<V>;
    static inline binaryfunc add = nullptr;
};
template <>
struct ValueSpec<Weight> : ShardedSpec<Weight> {};
template <>
struct ValueSpec<OptState> : ShardedSpec<OptState> {};

template <class V>
struct BatchedSpec {  // Activation, ActivationGrad
    static inline PyGetSetDef getset[] = {
        {"layer", &get_int<V, &V::layer>, nullptr, nullptr, nullptr},
        {"batches", &get_ids<V, &V::batches>, nullptr, "a frozenset of the batch ids", nullptr},
        {nullptr, nullptr, nullptr, nullptr, nullptr},
    };
    static inline PyMethodDef methods[] = {{nullptr, nullptr, 0, nullptr}};
    static inline newfunc tp_new = &batched_new<V>;
    static inline binaryfunc add = nullptr;
};
template <>
struct ValueSpec<Activation> : BatchedSpec<Activation> {};
template <>
struct ValueSpec<ActivationGrad> : BatchedSpec<ActivationGrad> {};

template <>
struct ValueSpec<WeightGrad> {
    static inline PyGetSetDef getset[] = {
        {"layer", &get_int<WeightGrad, &WeightGrad::layer>, nullptr, nullptr, nullptr},
        {"batches", &get_ids<WeightGrad, &WeightGrad::batches>, nullptr, "a frozenset of the batch ids", nullptr},
        {"shards", &get_ids<WeightGrad, &WeightGrad::shards>, nullptr, "a frozenset of the shard ids held", nullptr},
        {"total", &get_int<WeightGrad, &WeightGrad::total>, nullptr, "the number of shards the layer is cut into", nullptr},
        {nullptr, nullptr, nullptr, nullptr, nullptr},
    };
    static inline PyMethodDef methods[] = {
        {"is_complete", method(&is_complete<WeightGrad>), METH_NOARGS, "every shard is held"},
        {"combine", method(&combine<WeightGrad>), METH_O, "the union of the shards of two parts of the same layer"},
        {"shard", method(&shard<WeightGrad>), METH_FASTCALL, "shard(s, n): shard s of n of a complete value"},
        {nullptr, nullptr, 0, nullptr},
    };
    static inline newfunc tp_new = &weight_grad_new;
    static inline binaryfunc add = &weight_grad_add;
};

// A heap type from its spec's name, slots and bases (null: object); a new reference.
PyTypeObject* make_type(PyType_Spec& spec, PyObject* bases = nullptr) {
    PyObject* t = bases ? PyType_FromSpecWithBases(&spec, bases) : PyType_FromSpec(&spec);
    if (!t) throw py::error_already_set();
    return reinterpret_cast<PyTypeObject*>(t);
}

template <class V>
void add_value_type(py::module_& m, const char* qualified) {
    using S = ValueSpec<V>;
    static PyType_Slot slots[] = {
        {Py_tp_dealloc, slot(&value_dealloc<V>)},
        {Py_tp_repr, slot(&value_repr<V>)},
        {Py_tp_getset, S::getset},
        {Py_tp_methods, S::methods},
        {Py_tp_new, slot(S::tp_new)},
        // The addition, for the types that have one (a zero slot ends the list: the others end here).
        {S::add ? Py_nb_add : 0, S::add ? slot(S::add) : nullptr},
        {0, nullptr},
    };
    static PyType_Spec spec{qualified, static_cast<int>(sizeof(ValueObject<V>)), 0, Py_TPFLAGS_DEFAULT, slots};
    value_type<V> = make_type(spec);
    m.add_object(value_name<V>(), reinterpret_cast<PyObject*>(value_type<V>));
}

// ------------------------------------------------------------------ stores

// dtsim._core.Store, the base of dtsim.puzzles.Store: a dict whose writes and
// deletions also go to the engine's store of the same kind in the model, so
// that the memory an operation records is the rank's memory then, exactly as
// a C++ strategy's store keeps it. Reads are the dict's own.
struct StoreObject {
    PyDictObject dict;
    std::shared_ptr<World> world;  // keeps the model alive
    Model* model;
    int which;  // weights, opt_states, activations, grad_activations, grad_weights
};

constexpr int kStores = 5;  // the model's stores, numbered as with_store takes them

// Calls f with model's store number `which`.
template <class F>
decltype(auto) with_store(Model& model, int which, F&& f) {
    switch (which) {
        case 0: return f(model.weights);
        case 1: return f(model.opt_states);
        case 2: return f(model.activations);
        case 3: return f(model.grad_activations);
        default: return f(model.grad_weights);
    }
}

template <class S>
struct store_value;
template <class V>
struct store_value<puzzle::Store<V>> {
    using type = V;
};

// A store key, as the Python dicts are indexed: an int or a pair of ints
// (exactly: not a bool, not a subclass). Returns 0, or -1 when `key` is not
// one, -2 when its ints do not fit in the engine's.
int store_key(PyObject* key, Key& out) {
    const auto to_int = [](PyObject* o, std::int32_t& v) {
        int overflow = 0;
        const long x = PyLong_AsLongAndOverflow(o, &overflow);
        if (overflow || x < INT_MIN || x > INT_MAX) return false;
        v = static_cast<std::int32_t>(x);
        return true;
    };
    if (PyLong_CheckExact(key)) return to_int(key, out.a) ? 0 : -2;
    if (!PyTuple_CheckExact(key) || PyTuple_GET_SIZE(key) != 2 || !PyLong_CheckExact(PyTuple_GET_ITEM(key, 0)) ||
        !PyLong_CheckExact(PyTuple_GET_ITEM(key, 1)))
        return -1;
    return to_int(PyTuple_GET_ITEM(key, 0), out.a) && to_int(PyTuple_GET_ITEM(key, 1), out.b) ? 0 : -2;
}

bool checked_store_key(const char* store, PyObject* key, Key& out) {
    switch (store_key(key, out)) {
        case 0: return true;
        case -1: PyErr_Format(PyExc_TypeError, "%s[%R]: a key is an int or a pair of ints", store, key); return false;
        default: PyErr_Format(PyExc_OverflowError, "%s[%R]: a key's ints must fit in 32 bits", store, key); return false;
    }
}

int store_ass_subscript(PyObject* self, PyObject* key, PyObject* value) {
    auto* s = reinterpret_cast<StoreObject*>(self);
    return with_store(*s->model, s->which, [&](auto& store) -> int {
        using V = typename store_value<std::remove_reference_t<decltype(store)>>::type;
        const char* name = puzzle::store_name<V>();
        Key k(0);
        if (!value) {  // del store[key]
            if (PyDict_DelItem(self, key) < 0 || !checked_store_key(name, key, k)) return -1;
            try {
                store.erase(k);
            } catch (...) {
                set_python_error();
                return -1;
            }
            return 0;
        }
        const V* v = unwrap<V>(value);
        if (!v) {
            PyErr_Format(PyExc_TypeError, "%s[%R]: expected a %s, not %s", name, key, value_name<V>(), type_name(value).c_str());
            return -1;
        }
        if (!checked_store_key(name, key, k)) return -1;
        try {
            store.set(k, V(*v));
        } catch (...) {
            set_python_error();
            return -1;
        }
        return PyDict_SetItem(self, key, value);
    });
}

// Store(model, which): the model's store number `which` (0 to 4, weights to grad_weights).
PyObject* store_new(PyTypeObject* type, PyObject* args, PyObject* kwds) {
    static const char* kw[] = {"model", "which", nullptr};
    PyObject* model = nullptr;
    int which = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "Oi", const_cast<char**>(kw), &model, &which)) return nullptr;
    if (which < 0 || which >= kStores) {
        PyErr_Format(PyExc_ValueError, "Store: which is 0 to 4 (got %d)", which);
        return nullptr;
    }
    return guarded([&]() -> PyObject* {
        Model& m = model_of(model);
        const auto empty = py::reinterpret_steal<py::object>(PyTuple_New(0));
        if (!empty) return nullptr;
        PyObject* self = PyDict_Type.tp_new(type, empty.ptr(), nullptr);
        if (!self) return nullptr;
        auto* s = reinterpret_cast<StoreObject*>(self);
        new (&s->world) std::shared_ptr<World>(reinterpret_cast<ModelObject*>(model)->world);
        s->model = &m;
        s->which = which;
        return self;
    });
}

int store_init(PyObject*, PyObject*, PyObject*) { return 0; }  // (store_new took the arguments, not dict's)

void store_dealloc(PyObject* self) {
    PyTypeObject* type = Py_TYPE(self);
    reinterpret_cast<StoreObject*>(self)->world.~shared_ptr();
    PyDict_Type.tp_dealloc(self);
    Py_DECREF(type);
}

int store_traverse(PyObject* self, visitproc visit, void* arg) {
    Py_VISIT(Py_TYPE(self));
    return PyDict_Type.tp_traverse(self, visit, arg);
}

int store_clear(PyObject* self) { return PyDict_Type.tp_clear(self); }

void add_store_type(py::module_& m) {
    static PyType_Slot slots[] = {
        {Py_tp_new, slot(&store_new)},
        {Py_tp_init, slot(&store_init)},
        {Py_tp_dealloc, slot(&store_dealloc)},
        {Py_tp_traverse, slot(&store_traverse)},
        {Py_tp_clear, slot(&store_clear)},
        {Py_mp_ass_subscript, slot(&store_ass_subscript)},
        {0, nullptr},
    };
    static PyType_Spec spec{"dtsim._core.Store", static_cast<int>(sizeof(StoreObject)), 0,
                            Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE | Py_TPFLAGS_HAVE_GC, slots};
    const auto bases = py::reinterpret_steal<py::object>(PyTuple_Pack(1, reinterpret_cast<PyObject*>(&PyDict_Type)));
    if (!bases) throw py::error_already_set();
    m.add_object("Store", reinterpret_cast<PyObject*>(make_type(spec, bases.ptr())));
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

ModelObject* as_model(PyObject* o) { return reinterpret_cast<ModelObject*>(o); }

// The engine's model of `self`, or null with the error set when __init__ has not made it.
Model* engine(PyObject* self) {
    Model* m = as_model(self)->model;
    if (!m) PyErr_SetString(PyExc_RuntimeError, "Model: __init__ has not run");
    return m;
}

PyObject* model_new(PyTypeObject* type, PyObject*, PyObject*) {
    PyObject* self = type->tp_alloc(type, 0);
    if (self) {
        new (&as_model(self)->world) std::shared_ptr<World>();
        as_model(self)->model = nullptr;
    }
    return self;
}

// Model(layers, batches, rank, dist): rank `rank`'s model on the Dist `dist`.
int model_init(PyObject* self, PyObject* args, PyObject* kwds) {
    static const char* kw[] = {"layers", "batches", "rank", "dist", nullptr};
    int layers = 0;
    int batches = 0;
    int rank = 0;
    PyObject* dist = nullptr;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "iiiO", const_cast<char**>(kw), &layers, &batches, &rank, &dist))
        return -1;
    ModelObject* m = as_model(self);
    if (m->model) {
        PyErr_SetString(PyExc_RuntimeError, "Model: __init__ has already run");
        return -1;
    }
    try {
        auto& d = py::handle(dist).cast<PyDist&>();
        m->model = &make_model(d, layers, batches, rank);
        m->world = d.world;
        return 0;
    } catch (...) {
        set_python_error();
        return -1;
    }
}

void model_dealloc(PyObject* self) {
    PyTypeObject* type = Py_TYPE(self);
    as_model(self)->world.~shared_ptr();
    type->tp_free(self);
    Py_DECREF(type);
}

PyObject* load_weights(PyObject* self, PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames) {
    static constexpr Params<3> p{"load_weights", {"layer", "shard", "total"}, 1};
    std::array<PyObject*, 3> a{};
    int layer = 0;
    int shard = 0;
    int total = 1;
    Model* m = engine(self);
    if (!m || !p.parse(args, nargs, kwnames, a) || !p.int_arg(a, 0, layer) || !p.int_arg(a, 1, shard) ||
        !p.int_arg(a, 2, total))
        return nullptr;
    return guarded([&] { return pair(m->load_weights(layer, shard, total)); });
}

PyObject* get_activation(PyObject* self, PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames) {
    static constexpr Params<1> p{"get_activation", {"batches"}, 1};
    std::array<PyObject*, 1> a{};
    Model* m = engine(self);
    if (!m || !p.parse(args, nargs, kwnames, a)) return nullptr;
    return guarded([&]() -> PyObject* {
        IdSet batches;
        if (!to_ids(a[0], batches)) return nullptr;
        return wrap(m->get_activation(std::move(batches)));
    });
}

PyObject* forward(PyObject* self, PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames) {
    static constexpr Params<3> p{"forward", {"layer", "inp", "weight"}, 3};
    std::array<PyObject*, 3> a{};
    int layer = 0;
    Model* m = engine(self);
    if (!m || !p.parse(args, nargs, kwnames, a) || !p.int_arg(a, 0, layer)) return nullptr;
    const auto* inp = value_arg<Activation>(a[1], p.function, "inp");
    const auto* weight = inp ? value_arg<Weight>(a[2], p.function, "weight") : nullptr;
    if (!weight) return nullptr;
    return guarded([&] { return wrap(m->forward(layer, *inp, *weight)); });
}

PyObject* backward(PyObject* self, PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames) {
    static constexpr Params<4> p{"backward", {"layer", "inp", "grad", "weight"}, 4};
    std::array<PyObject*, 4> a{};
    int layer = 0;
    Model* m = engine(self);
    if (!m || !p.parse(args, nargs, kwnames, a) || !p.int_arg(a, 0, layer)) return nullptr;
    const auto* inp = value_arg<Activation>(a[1], p.function, "inp");
    const auto* grad = inp ? value_arg<ActivationGrad>(a[2], p.function, "grad") : nullptr;
    const auto* weight = grad ? value_arg<Weight>(a[3], p.function, "weight") : nullptr;
    if (!weight) return nullptr;
    return guarded([&] { return pair(m->backward(layer, *inp, *grad, *weight)); });
}

PyObject* loss(PyObject* self, PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames) {
    static constexpr Params<1> p{"loss", {"inp"}, 1};
    std::array<PyObject*, 1> a{};
    Model* m = engine(self);
    if (!m || !p.parse(args, nargs, kwnames, a)) return nullptr;
    const auto* inp = value_arg<Activation>(a[0], p.function, "inp");
    if (!inp) return nullptr;
    return guarded([&] { return wrap(m->loss(*inp)); });
}

PyObject* update(PyObject* self, PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames) {
    // (The reference takes a shard and does not use it.)
    static constexpr Params<5> p{"update", {"layer", "weight_grad", "weight", "opt_state", "shard"}, 4};
    std::array<PyObject*, 5> a{};
    int layer = 0;
    int shard = 0;
    Model* m = engine(self);
    if (!m || !p.parse(args, nargs, kwnames, a) || !p.int_arg(a, 0, layer) || !p.int_arg(a, 4, shard)) return nullptr;
    const auto* grad = value_arg<WeightGrad>(a[1], p.function, "weight_grad");
    const auto* weight = grad ? value_arg<Weight>(a[2], p.function, "weight") : nullptr;
    const auto* opt_state = weight ? value_arg<OptState>(a[3], p.function, "opt_state") : nullptr;
    if (!opt_state) return nullptr;
    return guarded([&] { return pair(m->update(layer, *grad, *weight, *opt_state)); });
}

PyObject* fake_grad(PyObject* self, PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames) {
    static constexpr Params<2> p{"fake_grad", {"layer", "batches"}, 2};
    std::array<PyObject*, 2> a{};
    int layer = 0;
    Model* m = engine(self);
    if (!m || !p.parse(args, nargs, kwnames, a) || !p.int_arg(a, 0, layer)) return nullptr;
    return guarded([&]() -> PyObject* {
        IdSet batches;
        if (!to_ids(a[1], batches)) return nullptr;
        return wrap(m->fake_grad(layer, std::move(batches)));
    });
}

PyObject* set_final_weight(PyObject* self, PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames) {
    static constexpr Params<2> p{"set_final_weight", {"layer", "weight"}, 2};
    std::array<PyObject*, 2> a{};
    int layer = 0;
    Model* m = engine(self);
    if (!m || !p.parse(args, nargs, kwnames, a) || !p.int_arg(a, 0, layer)) return nullptr;
    const auto* weight = value_arg<Weight>(a[1], p.function, "weight");
    if (!weight) return nullptr;
    return guarded([&] {
        m->set_final_weight(layer, *weight);
        Py_RETURN_NONE;
    });
}

PyObject* memory(PyObject* self, PyObject*) {
    Model* m = engine(self);
    return m ? PyFloat_FromDouble(m->memory()) : nullptr;
}

PyObject* get_time(PyObject* self, void*) {
    Model* m = engine(self);
    return m ? PyFloat_FromDouble(m->time()) : nullptr;
}

PyObject* get_final_weights(PyObject* self, void*) {
    Model* m = engine(self);
    if (!m) return nullptr;
    return guarded([&]() -> PyObject* {
        py::dict out;
        for (int l = 0; l < m->LAYERS; ++l)
            if (const Weight* w = m->final_weight(l)) out[py::int_(l)] = wrap_object(Weight(*w));
        return out.release().ptr();
    });
}

template <auto member>
PyObject* get_size(PyObject* self, void*) {  // _rank, _RANKS, _LAYERS, _BATCHES
    Model* m = engine(self);
    return m ? PyLong_FromLong(m->*member) : nullptr;
}

// ------------------------------------------------------------------ requests

PyObject* make_request(PyObject* self, RequestOp op, PyObject* value, int layer, int dst) {
    auto* r = PyObject_GC_New(RequestObject, request_type);
    if (!r) return nullptr;
    r->op = op;
    r->layer = layer;
    r->dst = dst;
    r->yielded = false;
    Py_INCREF(value);
    r->value = value;
    Py_INCREF(self);
    r->owner = as_model(self);
    PyObject_GC_Track(r);
    return reinterpret_cast<PyObject*>(r);
}

// allreduce(v, layer) and the other collectives: v must be one of Vs.
template <RequestOp op, class... Vs>
PyObject* collective(PyObject* self, PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames) {
    static constexpr Params<2> p{request_name(op), {"v", "layer"}, 2};
    std::array<PyObject*, 2> a{};
    int layer = 0;
    if (!engine(self) || !p.parse(args, nargs, kwnames, a) || !p.int_arg(a, 1, layer)) return nullptr;
    if (!(unwrap<Vs>(a[0]) || ...)) {
        if constexpr (sizeof...(Vs) == 1)
            PyErr_Format(PyExc_TypeError, "%s(): v must be %s, not %s", p.function, a_value_name<Vs...>(),
                         type_name(a[0]).c_str());
        else
            PyErr_Format(PyExc_TypeError, "%s(): v must be a Weight, an OptState or a WeightGrad, not %s", p.function,
                         type_name(a[0]).c_str());
        return nullptr;
    }
    return make_request(self, op, a[0], layer, -1);
}

PyObject* pass_to(PyObject* self, PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames) {
    static constexpr Params<2> p{"pass_to", {"rank", "v"}, 2};
    std::array<PyObject*, 2> a{};
    int dst = 0;
    if (!engine(self) || !p.parse(args, nargs, kwnames, a) || !p.int_arg(a, 0, dst)) return nullptr;
    return make_request(self, RequestOp::pass_to, a[1], kNoLayer, dst);
}

PyObject* receive(PyObject* self, PyObject*) {
    if (!engine(self)) return nullptr;
    return make_request(self, RequestOp::receive, Py_None, kNoLayer, -1);
}

void add_model_type(py::module_& m) {
    static PyMethodDef methods[] = {
        {"load_weights", method(&load_weights), METH_FASTCALL | METH_KEYWORDS,
         "load_weights(layer, shard=0, total=1): (Weight, OptState)"},
        {"get_activation", method(&get_activation), METH_FASTCALL | METH_KEYWORDS, "get_activation(batches): Activation"},
        {"forward", method(&forward), METH_FASTCALL | METH_KEYWORDS, "forward(layer, inp, weight): Activation"},
        {"backward", method(&backward), METH_FASTCALL | METH_KEYWORDS,
         "backward(layer, inp, grad, weight): (WeightGrad, ActivationGrad)"},
        {"loss", method(&loss), METH_FASTCALL | METH_KEYWORDS, "loss(inp): ActivationGrad"},
        {"update", method(&update), METH_FASTCALL | METH_KEYWORDS,
         "update(layer, weight_grad, weight, opt_state, shard=0): (Weight, OptState)"},
        {"fake_grad", method(&fake_grad), METH_FASTCALL | METH_KEYWORDS, "fake_grad(layer, batches): WeightGrad"},
        {"set_final_weight", method(&set_final_weight), METH_FASTCALL | METH_KEYWORDS, "set_final_weight(layer, weight)"},
        {"memory", method(&memory), METH_NOARGS, "the GPU's memory now: everything held in the five stores"},
        {"allreduce", method(&collective<RequestOp::allreduce, WeightGrad>), METH_FASTCALL | METH_KEYWORDS,
         "allreduce(v, layer): awaitable, a WeightGrad"},
        {"allgather", method(&collective<RequestOp::allgather, Weight, OptState, WeightGrad>),
         METH_FASTCALL | METH_KEYWORDS, "allgather(v, layer): awaitable, v gathered"},
        {"scatterreduce", method(&collective<RequestOp::scatterreduce, WeightGrad>), METH_FASTCALL | METH_KEYWORDS,
         "scatterreduce(v, layer): awaitable, a WeightGrad"},
        {"pass_to", method(&pass_to), METH_FASTCALL | METH_KEYWORDS, "pass_to(rank, v): awaitable"},
        {"receive", method(&receive), METH_NOARGS, "receive(): awaitable, what a rank passed"},
        {nullptr, nullptr, 0, nullptr},
    };
    static PyGetSetDef getset[] = {
        {"time", &get_time, nullptr, "the GPU's clock", nullptr},
        {"final_weights", &get_final_weights, nullptr, "the final weights set, by layer", nullptr},
        {"_rank", &get_size<&Model::rank>, nullptr, nullptr, nullptr},
        {"_RANKS", &get_size<&Model::RANKS>, nullptr, nullptr, nullptr},
        {"_LAYERS", &get_size<&Model::LAYERS>, nullptr, nullptr, nullptr},
        {"_BATCHES", &get_size<&Model::BATCHES>, nullptr, nullptr, nullptr},
        {nullptr, nullptr, nullptr, nullptr, nullptr},
    };
    static PyType_Slot slots[] = {
        {Py_tp_new, slot(&model_new)},
        {Py_tp_init, slot(&model_init)},
        {Py_tp_dealloc, slot(&model_dealloc)},
        {Py_tp_methods, methods},
        {Py_tp_getset, getset},
        {0, nullptr},
    };
    static PyType_Spec spec{"dtsim._core.Model", static_cast<int>(sizeof(ModelObject)), 0,
                            Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE, slots};
    model_type = make_type(spec);
    m.add_object("Model", reinterpret_cast<PyObject*>(model_type));
}

RequestObject* as_request(PyObject* o) { return reinterpret_cast<RequestObject*>(o); }

// `await request`: the request is its own iterator, which yields itself once
// and returns what is sent back (a generator's `return (yield self)`, without
// a generator). Each await starts again, so a request awaited twice runs twice.
PyObject* request_await(PyObject* self) {
    as_request(self)->yielded = false;
    Py_INCREF(self);
    return self;
}

PySendResult request_send(PyObject* self, PyObject* arg, PyObject** result) {
    RequestObject* r = as_request(self);
    PyObject* out = r->yielded ? arg : self;
    r->yielded = !r->yielded;
    Py_INCREF(out);
    *result = out;
    return r->yielded ? PYGEN_NEXT : PYGEN_RETURN;
}

// What an interpreter that does not use am_send calls instead (a tracing one: next() and send()).
PyObject* request_next(PyObject* self) {
    RequestObject* r = as_request(self);
    r->yielded = !r->yielded;
    if (!r->yielded) return nullptr;  // StopIteration: the await's value is None
    Py_INCREF(self);
    return self;
}

PyObject* request_send_method(PyObject* self, PyObject* arg) {
    PyObject* result = nullptr;
    if (request_send(self, arg, &result) == PYGEN_NEXT) return result;
    // The await's value travels in StopIteration (made from a one-tuple, so that a tuple is not unpacked).
    PyObject* stop = PyObject_CallOneArg(PyExc_StopIteration, result);
    Py_DECREF(result);
    if (stop) {
        PyErr_SetObject(PyExc_StopIteration, stop);
        Py_DECREF(stop);
    }
    return nullptr;
}

PyObject* request_repr(PyObject* self) {
    const RequestObject* r = as_request(self);
    return PyUnicode_FromFormat("<dtsim request %s (rank %d)>", request_name(r->op), r->owner->model->rank);
}

void request_dealloc(PyObject* self) {
    PyTypeObject* type = Py_TYPE(self);
    PyObject_GC_UnTrack(self);
    Py_CLEAR(as_request(self)->value);
    Py_CLEAR(as_request(self)->owner);
    PyObject_GC_Del(self);
    Py_DECREF(type);
}

int request_traverse(PyObject* self, visitproc visit, void* arg) {
    Py_VISIT(Py_TYPE(self));
    Py_VISIT(as_request(self)->value);
    Py_VISIT(as_request(self)->owner);
    return 0;
}

int request_clear(PyObject* self) {
    Py_CLEAR(as_request(self)->value);
    Py_CLEAR(as_request(self)->owner);
    return 0;
}

void add_request_type(py::module_& m) {
    static PyMethodDef methods[] = {
        {"send", method(&request_send_method), METH_O, nullptr},
        {nullptr, nullptr, 0, nullptr},
    };
    static PyType_Slot slots[] = {
        {Py_tp_dealloc, slot(&request_dealloc)},
        {Py_tp_traverse, slot(&request_traverse)},
        {Py_tp_clear, slot(&request_clear)},
        {Py_tp_repr, slot(&request_repr)},
        {Py_tp_iter, slot(&PyObject_SelfIter)},
        {Py_tp_iternext, slot(&request_next)},
        {Py_tp_methods, methods},
        {Py_am_await, slot(&request_await)},
        {Py_am_send, slot(&request_send)},
        {0, nullptr},
    };
    // Made only by the model's operations.
    static PyType_Spec spec{"dtsim._core.Request", static_cast<int>(sizeof(RequestObject)), 0,
                            Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_DISALLOW_INSTANTIATION, slots};
    request_type = make_type(spec);
    m.add_object("Request", reinterpret_cast<PyObject*>(request_type));
}

}  // namespace

Model& model_of(PyObject* o) {
    if (!PyObject_TypeCheck(o, model_type))
        throw py::type_error(fmt::format("expected a dtsim.puzzles.Model, not {}", type_name(o)));
    Model* m = as_model(o)->model;
    if (!m) throw std::runtime_error("Model: __init__ has not run");
    return *m;
}

void add_objects(py::module_& m) {
    add_value_type<Weight>(m, "dtsim._core.Weight");
    add_value_type<OptState>(m, "dtsim._core.OptState");
    add_value_type<Activation>(m, "dtsim._core.Activation");
    add_value_type<ActivationGrad>(m, "dtsim._core.ActivationGrad");
    add_value_type<WeightGrad>(m, "dtsim._core.WeightGrad");
    add_store_type(m);
    add_model_type(m);
    add_request_type(m);
}

}  // namespace dtsim::python
