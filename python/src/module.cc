// Copyright 2026 The Strata Authors.
//
// strata._strata: the Python binding of libstrata. The `strata` package
// (python/strata/__init__.py) re-exports it; docs/python.md is the guide.
//
// Contracts kept here:
//   - No Python object is touched while the GIL is released; every save,
//     restore, wait and handshake releases it.
//   - Save() reads the caller's buffers in place (no copy on the Python side)
//     and holds them until it returns.
//   - A non-OK Status becomes a strata.Error subclass carrying the same
//     message.
#include <pybind11/chrono.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cmath>
#include <csignal>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "binding.h"
#include "buffers.h"
#include "strata/checkpointer.h"
#include "strata/replicator.h"

namespace strata::python {
namespace py = pybind11;

namespace {

// Python exception classes, one per family of status codes. Created once
// at import and never freed (they must outlive every interpreter object).
struct Errors {
  PyObject* base = nullptr;
  PyObject* invalid_argument = nullptr;
  PyObject* not_found = nullptr;
  PyObject* data_loss = nullptr;
  PyObject* failed_precondition = nullptr;
  PyObject* deadline_exceeded = nullptr;
  PyObject* unavailable = nullptr;
};
Errors g_errors;

PyObject* ErrorClassFor(StatusCode code) {
  switch (code) {
    case StatusCode::kInvalidArgument:
    case StatusCode::kOutOfRange:
      return g_errors.invalid_argument;
    case StatusCode::kNotFound:
      return g_errors.not_found;
    case StatusCode::kDataLoss:
      return g_errors.data_loss;
    case StatusCode::kFailedPrecondition:
      return g_errors.failed_precondition;
    case StatusCode::kDeadlineExceeded:
      return g_errors.deadline_exceeded;
    case StatusCode::kUnavailable:
      return g_errors.unavailable;
    default:
      return g_errors.base;
  }
}

PyObject* NewError(py::module_& m, const char* name, PyObject* bases, const char* doc) {
  std::string qualified = std::string("strata.") + name;
  PyObject* cls = PyErr_NewExceptionWithDoc(qualified.c_str(), doc, bases, nullptr);
  if (cls == nullptr) throw py::error_already_set();
  Py_INCREF(cls);
  m.add_object(name, py::handle(cls));
  return cls;
}

PyObject* Bases(std::initializer_list<PyObject*> classes) {
  PyObject* t = PyTuple_New(static_cast<Py_ssize_t>(classes.size()));
  Py_ssize_t i = 0;
  for (PyObject* c : classes) {
    Py_INCREF(c);
    PyTuple_SET_ITEM(t, i++, c);
  }
  return t;
}

void DefineErrors(py::module_& m) {
  g_errors.base = NewError(m, "Error", PyExc_RuntimeError,
                           "A Strata operation failed; the message names what it is about.");
  auto derived = [&](const char* name, PyObject* also, const char* doc) {
    return NewError(m, name, Bases({g_errors.base, also}), doc);
  };
  g_errors.invalid_argument =
      derived("InvalidArgumentError", PyExc_ValueError, "Bad input: an option, an item, a shape.");
  g_errors.not_found = derived("NotFoundError", PyExc_LookupError, "Nothing to restore.");
  g_errors.data_loss = derived("DataLossError", PyExc_IOError, "Corrupt or truncated bytes.");
  g_errors.failed_precondition =
      derived("FailedPreconditionError", PyExc_RuntimeError,
              "The system is not in a state to do this (a locked directory, a refused job).");
  g_errors.deadline_exceeded =
      derived("DeadlineExceededError", PyExc_TimeoutError, "Waited too long (e.g. for the agent).");
  g_errors.unavailable =
      derived("UnavailableError", PyExc_ConnectionError, "Transient; retrying may succeed.");
  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const StatusException& e) {
      PyErr_SetString(ErrorClassFor(e.status.code()), e.status.ToString().c_str());
    }
  });
}

// Polled by the agent handshake while it waits (GIL released): runs Python's
// signal handlers, so Ctrl-C ends a wait for an agent that never answers.
Status CheckInterrupts() {
  py::gil_scoped_acquire gil;
  if (PyErr_CheckSignals() != 0) return CancelledError("interrupted while waiting for the agent");
  return Status::Ok();
}

// A duration option in seconds: finite, >= 0.
template <typename Duration>
Duration ToDuration(double seconds, const char* what) {
  if (!std::isfinite(seconds) || seconds < 0) {
    Raise(InvalidArgumentError(std::string(what) +
                               " must be a finite number of seconds >= 0, not " +
                               std::to_string(seconds)));
  }
  return std::chrono::duration_cast<Duration>(std::chrono::duration<double>(seconds));
}

std::unique_ptr<PyCheckpointer> OpenCheckpointer(
    const std::string& dir, int64_t save_interval_steps, double save_interval_seconds,
    int max_to_keep, bool recycle_space, bool async_save, int io_threads, uint64_t chunk_size,
    std::vector<int> preemption_signals, bool exit_after_ondemand, double grace_period,
    std::string agent_dir, bool use_agent, double sync_timeout, std::optional<AgentJob> agent_job) {
  CheckpointerOptions o;
  o.save_interval_steps = save_interval_steps;
  o.save_interval_seconds = save_interval_seconds;
  o.max_to_keep = max_to_keep;
  o.recycle_space = recycle_space;
  o.async = async_save;
  o.io_threads = io_threads;
  o.chunk_size = chunk_size;
  o.preemption_signals = std::move(preemption_signals);
  o.exit_after_ondemand = exit_after_ondemand;
  o.grace_period = ToDuration<std::chrono::seconds>(grace_period, "grace_period");
  o.agent_dir = std::move(agent_dir);
  o.use_agent = use_agent;
  o.sync_timeout = ToDuration<std::chrono::milliseconds>(sync_timeout, "sync_timeout");
  o.agent_job = std::move(agent_job);
  if (o.agent_job) o.agent_job->cancelled = CheckInterrupts;
  auto c = WithoutGil([&] { return Checkpointer::Open(dir, std::move(o)); });
  return std::make_unique<PyCheckpointer>(ValueOrRaise(std::move(c)));
}

SaveResult Save(PyCheckpointer& self, int64_t step, const py::handle& items, bool borrowed,
                const py::object& ready) {
  HeldBuffers held = HeldBuffers::FromPython(items, /*writable=*/false);
  SaveOptions options;
  options.borrowed = borrowed;
  if (!ready.is_none()) {
    if (!PyCallable_Check(ready.ptr())) throw py::type_error("ready must be callable or None");
    options.ready = ReadyGate(ready.ptr());
  }
  auto r = self.Run([&](Checkpointer& c) { return c.Save(step, held.items(), options); });
  self.ReleaseLent();  // the previous borrowed save has finished, unless Save refused early
  if (borrowed || !ready.is_none()) self.Lend({std::move(held), ready});
  return ValueOrRaise(std::move(r));
}

// Restore and RestoreInto return None for "nothing to restore" (NOT_FOUND),
// which is how a fresh start looks from Python.
// on_item(step, index, layout) for RestoreOptions::item_verified, called
// with the GIL from the reading threads; layout is a tuple of (name, address,
// nbytes) of every item of the step being read, the same object for every
// call of one step. The first exception it raises is raised by restore()
// (the restore itself runs to its end).
class ItemVerified {
 public:
  explicit ItemVerified(py::object fn) : fn_(std::move(fn)) {}
  ~ItemVerified() {
    py::gil_scoped_acquire gil;
    layout_ = py::object();
    fn_ = py::object();
  }

  void operator()(const RestoredStep& reading, size_t item) {
    py::gil_scoped_acquire gil;
    if (error_) return;
    try {
      const void* base = reading.items.empty() ? nullptr : reading.items[0].data.data();
      if (!layout_ || step_ != reading.step || base_ != base) {
        py::tuple layout(reading.items.size());
        for (size_t i = 0; i < reading.items.size(); ++i) {
          const RestoredItem& it = reading.items[i];
          layout[i] =
              py::make_tuple(it.name, reinterpret_cast<uintptr_t>(it.data.data()), it.data.size());
        }
        layout_ = std::move(layout);
        step_ = reading.step;
        base_ = base;
      }
      fn_(reading.step, item, layout_);
    } catch (py::error_already_set& e) {
      error_ = std::make_unique<py::error_already_set>(std::move(e));
    }
  }

  // Raises what the callback raised, if anything.
  void RaiseIfFailed() {
    if (error_) throw std::move(*error_);
  }

 private:
  py::object fn_;
  py::object layout_;
  int64_t step_ = -1;
  const void* base_ = nullptr;
  std::unique_ptr<py::error_already_set> error_;
};

std::optional<PyRestored> Restore(PyCheckpointer& self, std::optional<int64_t> step,
                                  const py::object& allocate, const py::object& on_item) {
  RestoreOptions options;
  options.step = step;
  std::shared_ptr<ItemVerified> verified;
  if (!on_item.is_none()) {
    if (!PyCallable_Check(on_item.ptr())) throw py::type_error("on_item must be callable or None");
    verified = std::make_shared<ItemVerified>(on_item);
    options.item_verified = [verified](const RestoredStep& reading, size_t item) {
      (*verified)(reading, item);
    };
  }
  // With `allocate`, the step is read into the writable buffer it returns
  // (the arrays then keep that object alive, not a mapping of their own).
  py::object memory;
  RestoreAllocator allocator;
  if (!allocate.is_none()) {
    allocator = [&](size_t size) -> StatusOr<std::span<std::byte>> {
      py::gil_scoped_acquire gil;
      try {
        py::object obj = allocate(size);
        if (obj.is_none()) return std::span<std::byte>();
        py::buffer_info info = py::reinterpret_borrow<py::buffer>(obj).request(true);
        if (info.ndim != 1 || info.strides[0] != info.itemsize) {
          return InvalidArgumentError("allocate() must return a contiguous 1-d writable buffer");
        }
        memory = obj;
        return std::span<std::byte>(static_cast<std::byte*>(info.ptr),
                                    static_cast<size_t>(info.size * info.itemsize));
      } catch (py::error_already_set& e) {
        return InvalidArgumentError(std::string("allocate() failed: ") + e.what());
      }
    };
  }
  auto r = self.Run([&](Checkpointer& c) { return c.RestoreToMemory(allocator, options); });
  self.ReleaseLent();
  RaisePending();
  if (verified) verified->RaiseIfFailed();
  if (!r.ok() && r.status().code() == StatusCode::kNotFound && !step) return std::nullopt;
  RestoredStep restored = ValueOrRaise(std::move(r));
  const bool lent_memory = !restored.storage.get_deleter().owned;
  return ToPython(std::move(restored), lent_memory ? memory : py::object());
}

std::optional<int64_t> RestoreInto(PyCheckpointer& self, const py::handle& items,
                                   std::optional<int64_t> step) {
  HeldBuffers held = HeldBuffers::FromPython(items, /*writable=*/true);
  std::vector<MutableItem> into = held.mutable_items();
  RestoreOptions options;
  options.step = step;
  auto r = self.Run([&](Checkpointer& c) { return c.RestoreInto(into, options); });
  self.ReleaseLent();
  RaisePending();
  if (!r.ok() && r.status().code() == StatusCode::kNotFound && !step) return std::nullopt;
  return ValueOrRaise(std::move(r));
}

void Wait(PyCheckpointer& self) {
  Status s;
  bool was_open = false;
  // The commit, without holding the training thread's calls; again if that
  // thread began the next save before this call's turn came (a bounded
  // number of times, then that save's commit is waited for in turn).
  for (int tries = 0;; ++tries) {
    was_open = self.AwaitIdleUnlocked() || was_open;
    bool again = false, ran = false;
    s = self.Run([&](Checkpointer& c) {
      ran = true;
      again = tries < 100 && c.status().in_flight_step.has_value();
      return again ? Status::Ok() : c.Wait();
    });
    if (again) continue;
    // Closed by another thread meanwhile: close() took the save's result
    // (and logged a failure) once it was done, which is what this waited for.
    if (!ran && was_open) s = Status::Ok();
    break;
  }
  self.ReleaseLent();
  ThrowIfError(s);
}

// Waits for the save in flight without taking its result (a closed
// checkpointer has none). Like wait(), it does not hold the training
// thread's calls while it waits when another thread makes it.
void AwaitIdle(PyCheckpointer& self) {
  self.AwaitIdleUnlocked();
  self.ReleaseLent();
  RaisePending();
}

PyRestored RestoreStepPy(const std::string& dir, int64_t step, int threads) {
  return ToPython(ValueOrRaise(WithoutGil([&] { return RestoreStep(dir, step, threads); })));
}

std::optional<py::tuple> Handshake(const std::string& local_dir, const AgentJob& job) {
  AgentJob copy = job;  // the Python object may change while the GIL is released
  copy.cancelled = CheckInterrupts;
  auto point = ValueOrRaise(WithoutGil([&] { return AgentHandshake(local_dir, copy); }));
  if (!point) return std::nullopt;
  return py::make_tuple(point->steps_dir, point->step);
}

AgentJob MakeAgentJob(std::string job, int node_rank, int nodes, int peers_per_node,
                      int assume_data_parallelism, int backup_interval_steps,
                      int backup_interval_minutes, std::string style, double timeout) {
  AgentJob j;
  j.job = std::move(job);
  j.node_rank = node_rank;
  j.nodes = nodes;
  j.peers_per_node = peers_per_node;
  j.assume_data_parallelism = assume_data_parallelism;
  j.backup_interval_steps = backup_interval_steps;
  j.backup_interval_minutes = backup_interval_minutes;
  j.style = std::move(style);
  j.timeout = ToDuration<std::chrono::seconds>(std::ceil(timeout), "timeout");
  return j;
}

std::string OptionalRepr(const std::optional<int64_t>& v) {
  return v ? std::to_string(*v) : "None";
}

void DefineAgentJob(py::module_& m) {
  py::class_<AgentJob>(m, "AgentJob", "This process's part in a job whose nodes run agents.")
      .def(py::init(&MakeAgentJob), py::arg("job"), py::kw_only(), py::arg("node_rank") = 0,
           py::arg("nodes") = 1, py::arg("peers_per_node") = 1,
           py::arg("assume_data_parallelism") = 0, py::arg("backup_interval_steps") = 0,
           py::arg("backup_interval_minutes") = 0, py::arg("style") = "orbax",
           py::arg("timeout") = 300.0)
      .def_readwrite("job", &AgentJob::job)
      .def_readwrite("node_rank", &AgentJob::node_rank)
      .def_readwrite("nodes", &AgentJob::nodes)
      .def_readwrite("peers_per_node", &AgentJob::peers_per_node)
      .def_readwrite("assume_data_parallelism", &AgentJob::assume_data_parallelism)
      .def_readwrite("backup_interval_steps", &AgentJob::backup_interval_steps)
      .def_readwrite("backup_interval_minutes", &AgentJob::backup_interval_minutes)
      .def_readwrite("style", &AgentJob::style)
      .def_property(
          "timeout", [](const AgentJob& j) { return static_cast<double>(j.timeout.count()); },
          [](AgentJob& j, double t) {
            j.timeout = ToDuration<std::chrono::seconds>(std::ceil(t), "timeout");
          })
      .def("__repr__", [](const AgentJob& j) {
        return "AgentJob(job='" + j.job + "', node_rank=" + std::to_string(j.node_rank) +
               ", nodes=" + std::to_string(j.nodes) + ", style='" + j.style + "')";
      });
}

void DefineResults(py::module_& m) {
  py::class_<SaveResult>(m, "SaveResult", "What Checkpointer.save() did.")
      .def_readonly("step", &SaveResult::step)
      .def_readonly("on_demand", &SaveResult::on_demand, "The checkpoint a notice asked for.")
      .def_readonly("committed", &SaveResult::committed, "Durable when save() returned.")
      .def_readonly("should_exit", &SaveResult::should_exit,
                    "Exit now with EXIT_AFTER_ON_DEMAND (exit_after_ondemand was set).")
      .def("__repr__", [](const SaveResult& r) {
        auto b = [](bool v) { return v ? "True" : "False"; };
        return "SaveResult(step=" + std::to_string(r.step) + ", on_demand=" + b(r.on_demand) +
               ", committed=" + b(r.committed) + ", should_exit=" + b(r.should_exit) + ")";
      });
  py::class_<PyRestored>(m, "Restored", "A restored step: NumPy arrays over its memory.")
      .def_property_readonly("step", &PyRestored::step)
      .def_property_readonly("items", &PyRestored::items, "name -> numpy.ndarray")
      .def_property_readonly("dtypes", &PyRestored::dtypes, "name -> Strata dtype name")
      .def_property_readonly("lent", &PyRestored::lent,
                             "The arrays view step files, which a later save reuses once the step\n"
                             "is let go: copy what is kept.")
      .def("owned_copy", &PyRestored::OwnedCopy, py::arg("names"),
           "name -> array for each named item, copied (in parallel) into one block of\n"
           "memory of their own: what is kept of a lent step.")
      .def("__repr__", [](const PyRestored& r) {
        return "Restored(step=" + std::to_string(r.step()) + ", " + std::to_string(r.size()) +
               " items)";
      });
  py::class_<CheckpointerStatus>(m, "CheckpointerStatus")
      .def_readonly("in_flight_step", &CheckpointerStatus::in_flight_step)
      .def_readonly("last_committed_step", &CheckpointerStatus::last_committed_step)
      .def_property_readonly("last_error",
                             [](const CheckpointerStatus& s) -> std::optional<std::string> {
                               if (s.last_error.ok()) return std::nullopt;
                               return s.last_error.ToString();
                             })
      .def_readonly("notices", &CheckpointerStatus::notices)
      .def_readonly("agent_sync", &CheckpointerStatus::agent_sync)
      .def_readonly("sync_step", &CheckpointerStatus::sync_step)
      .def_readonly("staging_bytes", &CheckpointerStatus::staging_bytes,
                    "Bytes of the checkpointer's own staging memory.")
      .def_readonly("borrowed_in_flight", &CheckpointerStatus::borrowed_in_flight,
                    "The save in flight reads the caller's buffers (save(borrowed=True)).")
      .def_readonly("mapped_bytes", &CheckpointerStatus::mapped_bytes,
                    "Step files kept mapped for saves written in place (strata.torch).")
      .def_readonly("mapped_pinned", &CheckpointerStatus::mapped_pinned,
                    "All of them page-locked for device copies.")
      .def_readonly("reserving", &CheckpointerStatus::reserving,
                    "Memory for the next save is being prepared in the background.")
      .def("__repr__", [](const CheckpointerStatus& s) {
        return "CheckpointerStatus(in_flight_step=" + OptionalRepr(s.in_flight_step) +
               ", last_committed_step=" + OptionalRepr(s.last_committed_step) +
               ", notices=" + std::to_string(s.notices) + ")";
      });
}

void DefineCheckpointer(py::module_& m) {
  py::class_<PyCheckpointer> checkpointer(m, "Checkpointer");
  DefineStager(m, checkpointer);
  checkpointer
      .def(py::init(&OpenCheckpointer), py::arg("directory"), py::kw_only(),
           py::arg("save_interval_steps") = 0, py::arg("save_interval_seconds") = 0.0,
           py::arg("max_to_keep") = 2, py::arg("recycle_space") = true,
           py::arg("async_save") = true, py::arg("io_threads") = 0,
           py::arg("chunk_size") = uint64_t{4} << 20,
           py::arg("preemption_signals") = std::vector<int>{SIGTERM},
           py::arg("exit_after_ondemand") = false, py::arg("grace_period") = 300.0,
           py::arg("agent_dir") = "", py::arg("use_agent") = true, py::arg("sync_timeout") = 10.0,
           py::arg("agent_job") = py::none())
      .def(
          "should_save",
          [](PyCheckpointer& self, int64_t step) {
            return self.Quick([step](Checkpointer& c) { return c.ShouldSave(step); });
          },
          py::arg("step"))
      .def("save", &Save, py::arg("step"), py::arg("items"), py::kw_only(),
           py::arg("borrowed") = false, py::arg("ready") = py::none())
      .def("wait", &Wait)
      .def("await_idle", &AwaitIdle)
      .def("restore", &Restore, py::kw_only(), py::arg("step") = py::none(),
           py::arg("allocate") = py::none(), py::arg("on_item") = py::none())
      .def("restore_into", &RestoreInto, py::arg("items"), py::kw_only(),
           py::arg("step") = py::none())
      .def("request_on_demand",
           [](PyCheckpointer& self) { self.Quick([](Checkpointer& c) { c.RequestOnDemand(); }); })
      .def_property_readonly("status",
                             [](PyCheckpointer& self) {
                               return self.Quick([](Checkpointer& c) { return c.status(); });
                             })
      .def_property_readonly("directory", &PyCheckpointer::dir)
      .def_property_readonly("closed", &PyCheckpointer::closed)
      .def("close", &PyCheckpointer::Close)
      .def(
          "__enter__", [](PyCheckpointer& self) -> PyCheckpointer& { return self; },
          py::return_value_policy::reference)
      .def("__exit__", [](PyCheckpointer& self, const py::args&) { self.Close(); });
}

}  // namespace

PYBIND11_MODULE(_strata, m) {
  m.doc() = "Strata's checkpoint engine (libstrata); see docs/python.md.";
  DefineErrors(m);
  DefineAgentJob(m);
  DefineResults(m);
  DefineCheckpointer(m);
  DefineLayouts(m);
  m.def("restore_step", &RestoreStepPy, py::arg("directory"), py::arg("step"), py::kw_only(),
        py::arg("threads") = 0,
        "Restores directory/<step> without a Checkpointer (no lock, no fallback).");
  m.def("agent_handshake", &Handshake, py::arg("local_dir"), py::arg("job"),
        "The replicator handshake alone: (steps_dir, step), or None to start fresh.");
  m.def("version", &Version);
  m.attr("EXIT_AFTER_ON_DEMAND") = kExitAfterOnDemand;
}

}  // namespace strata::python
