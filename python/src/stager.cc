// Copyright 2026 The Strata Authors.
//
// The stager's side of strata.Checkpointer (include/strata/cuda.h): what
// strata.torch and strata.dcp save and restore through, so that the copies
// of a state -- device->host into the step's files, host->device as each
// item verifies -- are one C++ call per save or restore, with nothing done
// per tensor in Python on the way.
//
//   batch = strata.Batch([(name, dtype, shape, nbytes, device, deferrable), ...])
//   ckpt.save_batch(step, batch, pointers, streams={device: stream}, overlap=True)
//   ckpt.restore_planned(key, plan)   # plan(step, key_bytes) -> destinations
//
// A Batch is built once per layout of the state and reused while its
// tensors keep their names, dtypes, shapes and sizes; each save passes the
// items' addresses. The caller keeps every buffer alive and, for an
// overlapped save, unchanged until its copies are done (wait_staged(),
// order_after_staging(), the next save).
#include <pybind11/stl.h>

#include <optional>
#include <string>
#include <vector>

#include "binding.h"

namespace strata::python {
namespace {

// strata.Batch: the items of a state as the stager saves them (addresses
// and streams are the save's).
struct PyBatch {
  std::vector<DeviceItem> items;
};

DType DTypeNamed(const std::string& name, const std::string& item) {
  auto dtype = ParseDType(name);
  if (!dtype) throw py::value_error("item \"" + item + "\": unknown dtype \"" + name + "\"");
  return *dtype;
}

PyBatch MakeBatch(const py::iterable& specs) {
  PyBatch batch;
  for (py::handle spec : specs) {
    auto t = py::reinterpret_borrow<py::tuple>(spec);
    if (t.size() != 6) {
      throw py::value_error("a batch item is (name, dtype, shape, nbytes, device, deferrable)");
    }
    DeviceItem it;
    it.name = t[0].cast<std::string>();
    it.dtype = DTypeNamed(t[1].cast<std::string>(), it.name);
    it.shape = t[2].cast<std::vector<int64_t>>();
    it.size = t[3].cast<size_t>();
    it.device = t[4].cast<int>();
    it.deferrable = t[5].cast<bool>();
    batch.items.push_back(std::move(it));
  }
  return batch;
}

// The caller's streams by device: {device: cudaStream_t as an int}.
std::vector<std::pair<int, void*>> Streams(const py::object& streams) {
  std::vector<std::pair<int, void*>> out;
  if (streams.is_none()) return out;
  for (auto [device, stream] : py::reinterpret_borrow<py::dict>(streams)) {
    out.emplace_back(device.cast<int>(), reinterpret_cast<void*>(stream.cast<uintptr_t>()));
  }
  return out;
}

void* StreamOf(const std::vector<std::pair<int, void*>>& streams, int device) {
  for (const auto& [d, s] : streams) {
    if (d == device) return s;
  }
  return nullptr;
}

// The batch with this save's addresses and streams.
std::vector<DeviceItem> Bind(const PyBatch& batch, const py::sequence& pointers,
                             const py::object& streams) {
  if (pointers.size() != batch.items.size()) {
    throw py::value_error("save_batch: " + std::to_string(pointers.size()) + " pointers for " +
                          std::to_string(batch.items.size()) + " items");
  }
  const auto by_device = Streams(streams);
  std::vector<DeviceItem> items = batch.items;
  for (size_t i = 0; i < items.size(); ++i) {
    items[i].data = reinterpret_cast<const void*>(pointers[i].cast<uintptr_t>());
    items[i].stream = items[i].device >= 0 ? StreamOf(by_device, items[i].device) : nullptr;
  }
  return items;
}

// A Python callable as the stager's gate (called once, with the GIL, on the
// thread that commits). The callable is kept alive by PyCheckpointer::Lent.
std::function<Status()> Gate(const py::object& gate) {
  if (gate.is_none()) return nullptr;
  if (!PyCallable_Check(gate.ptr())) throw py::type_error("gate must be callable or None");
  PyObject* fn = gate.ptr();
  return [fn]() -> Status {
    if (PythonIsExiting()) return CancelledError("the interpreter is exiting");
    py::gil_scoped_acquire gil;
    try {
      py::handle callable(fn);
      callable();
      return Status::Ok();
    } catch (py::error_already_set& e) {
      return FailedPreconditionError(e.what());
    }
  };
}

SaveResult SaveBatch(PyCheckpointer& self, int64_t step, const PyBatch& batch,
                     const py::sequence& pointers, const py::object& streams, bool overlap,
                     const py::object& gate) {
  std::vector<DeviceItem> items = Bind(batch, pointers, streams);
  std::function<Status()> gated = Gate(gate);
  const DeviceSaveMode mode = overlap ? DeviceSaveMode::kOverlapped : DeviceSaveMode::kBlocking;
  auto r = self.Run([&](Checkpointer& c) -> StatusOr<SaveResult> {
    STRATA_ASSIGN_OR_RETURN(CudaStager * stager, self.Stager(c));
    return stager->Save(step, items, mode, gated);
  });
  self.ReleaseLent();  // the previous save has finished, unless Save refused early
  if (!gate.is_none()) self.Lend({HeldBuffers(), gate});
  return ValueOrRaise(std::move(r));
}

void ReserveBatch(PyCheckpointer& self, const PyBatch& batch) {
  std::vector<DeviceItem> items = batch.items;
  ThrowIfError(self.Run([&](Checkpointer& c) -> Status {
    STRATA_ASSIGN_OR_RETURN(CudaStager * stager, self.Stager(c));
    return stager->Reserve(items);
  }));
}

void WaitStaged(PyCheckpointer& self) {
  ThrowIfError(self.Run([&](Checkpointer& c) -> Status {
    STRATA_ASSIGN_OR_RETURN(CudaStager * stager, self.Stager(c));
    return stager->WaitStaged();
  }));
}

void OrderAfterStaging(PyCheckpointer& self, uintptr_t stream, int device) {
  ThrowIfError(self.Run([&](Checkpointer& c) -> Status {
    STRATA_ASSIGN_OR_RETURN(CudaStager * stager, self.Stager(c));
    return stager->OrderAfterStaging(reinterpret_cast<void*>(stream), device);
  }));
}

// plan(step, key) as CudaStager::RestorePlan: called with the GIL from a
// reading thread, `key` a memoryview of the key item (valid during the
// call); returns [(name, pointer, nbytes, device, stream), ...]. Its first
// exception is raised by restore_planned().
class Planner {
 public:
  explicit Planner(py::object fn) : fn_(std::move(fn)) {}
  ~Planner() {
    py::gil_scoped_acquire gil;
    fn_ = py::object();
  }

  StatusOr<std::vector<MutableDeviceItem>> operator()(const RestoredStep& reading,
                                                      const RestoredItem& key) {
    py::gil_scoped_acquire gil;
    try {
      auto view = py::memoryview::from_memory(key.data.data(),
                                              static_cast<py::ssize_t>(key.data.size()), true);
      py::object out = fn_(reading.step, view);
      std::vector<MutableDeviceItem> dest;
      for (py::handle h : py::reinterpret_borrow<py::iterable>(out)) {
        auto t = py::reinterpret_borrow<py::tuple>(h);
        if (t.size() != 5) {
          return InvalidArgumentError("plan() must return (name, pointer, nbytes, device, stream)");
        }
        MutableDeviceItem m;
        m.name = t[0].cast<std::string>();
        m.data = reinterpret_cast<void*>(t[1].cast<uintptr_t>());
        m.size = t[2].cast<size_t>();
        m.device = t[3].cast<int>();
        m.stream = reinterpret_cast<void*>(t[4].cast<uintptr_t>());
        dest.push_back(std::move(m));
      }
      return dest;
    } catch (py::error_already_set& e) {
      error_ = std::make_unique<py::error_already_set>(std::move(e));
      return CancelledError("plan() raised");
    } catch (py::cast_error& e) {
      return InvalidArgumentError(std::string("plan() returned a bad destination: ") + e.what());
    }
  }

  void RaiseIfFailed() {
    if (error_) throw std::move(*error_);
  }

 private:
  py::object fn_;
  std::unique_ptr<py::error_already_set> error_;
};

std::optional<PyRestored> RestorePlanned(PyCheckpointer& self, const std::string& key,
                                         const py::object& plan, std::optional<int64_t> step) {
  if (!PyCallable_Check(plan.ptr())) throw py::type_error("plan must be callable");
  auto planner = std::make_shared<Planner>(plan);
  RestoreOptions options;
  options.step = step;
  auto r = self.Run([&](Checkpointer& c) -> StatusOr<RestoredStep> {
    STRATA_ASSIGN_OR_RETURN(CudaStager * stager, self.Stager(c));
    return stager->RestorePlanned(
        key, [planner](const RestoredStep& s, const RestoredItem& k) { return (*planner)(s, k); },
        options);
  });
  self.ReleaseLent();
  RaisePending();
  planner->RaiseIfFailed();
  if (!r.ok() && r.status().code() == StatusCode::kNotFound && !step) return std::nullopt;
  return ToPython(ValueOrRaise(std::move(r)));
}

// The planned restore of one directory's step, without a checkpointer (the
// node agent's directory, another rank's): strata.dcp's reader.
std::optional<PyRestored> RestoreStepPlannedPy(const std::string& dir, int64_t step,
                                               const std::string& key, const py::object& plan,
                                               int threads) {
  if (!PyCallable_Check(plan.ptr())) throw py::type_error("plan must be callable");
  auto planner = std::make_shared<Planner>(plan);
  auto r = WithoutGil([&] {
    return RestoreStepPlanned(
        dir, step, key,
        [planner](const RestoredStep& s, const RestoredItem& k) { return (*planner)(s, k); },
        threads);
  });
  RaisePending();
  planner->RaiseIfFailed();
  return ToPython(ValueOrRaise(std::move(r)));
}

PyRestored RestoreStepItemsPy(const std::string& dir, int64_t step,
                              const std::vector<std::string>& names, int threads) {
  return ToPython(
      ValueOrRaise(WithoutGil([&] { return RestoreStepItems(dir, step, names, threads); })));
}

// strata.copy_to_host: each source's bytes to its destination (host
// memory), device sources on a stream per device after the stream given
// for it; returns when all are done. DCP's stager (strata._arena).
void CopyToHostPy(const std::vector<uintptr_t>& sources, const std::vector<size_t>& sizes,
                  const std::vector<int>& devices, const std::vector<uintptr_t>& destinations,
                  const py::object& streams) {
  const size_t n = sources.size();
  if (sizes.size() != n || devices.size() != n || destinations.size() != n) {
    throw py::value_error(
        "copy_to_host: sources, sizes, devices and destinations differ in length");
  }
  const auto by_device = Streams(streams);
  std::vector<DeviceItem> items(n);
  std::vector<std::byte*> dst(n);
  for (size_t i = 0; i < n; ++i) {
    items[i].name = "#" + std::to_string(i);
    items[i].data = reinterpret_cast<const void*>(sources[i]);
    items[i].size = sizes[i];
    items[i].device = devices[i];
    items[i].stream = devices[i] >= 0 ? StreamOf(by_device, devices[i]) : nullptr;
    dst[i] = reinterpret_cast<std::byte*>(destinations[i]);
  }
  ThrowIfError(WithoutGil([&] { return CopyToHost(items, dst); }));
}

py::dict StagerStatus(PyCheckpointer& self) {
  py::dict d;
  auto s = self.StagerStatus();
  CheckpointerStatus c = self.Quick([](Checkpointer& ckpt) { return ckpt.status(); });
  d["bytes"] = s ? s->staging_bytes : c.mapped_bytes;
  d["pinned"] = s ? s->staging_pinned : c.mapped_pinned;
  d["reserving"] = c.reserving || (s && s->reserving);  // the step files, or the copy path's block
  d["in_place"] = s ? s->in_place : false;
  d["devices"] = s ? s->devices : 0;
  d["copies_in_flight"] = s ? s->copies_in_flight : false;
  d["open"] = s.has_value();
  return d;
}

}  // namespace

void DefineStager(py::module_& m, py::class_<PyCheckpointer>& checkpointer) {
  py::class_<PyBatch>(m, "Batch",
                      "A state's items as the stager saves them: "
                      "[(name, dtype, shape, nbytes, device, deferrable), ...].")
      .def(py::init(&MakeBatch), py::arg("items"))
      .def("__len__", [](const PyBatch& b) { return b.items.size(); })
      .def_property_readonly("nbytes", [](const PyBatch& b) {
        uint64_t n = 0;
        for (const DeviceItem& it : b.items) n += it.size;
        return n;
      });
  checkpointer
      .def("save_batch", &SaveBatch, py::arg("step"), py::arg("batch"), py::arg("pointers"),
           py::kw_only(), py::arg("streams") = py::none(), py::arg("overlap") = false,
           py::arg("gate") = py::none())
      .def("reserve_batch", &ReserveBatch, py::arg("batch"))
      .def("wait_staged", &WaitStaged)
      .def("order_after_staging", &OrderAfterStaging, py::arg("stream"), py::arg("device"))
      .def("restore_planned", &RestorePlanned, py::arg("key"), py::arg("plan"), py::kw_only(),
           py::arg("step") = py::none())
      .def_property_readonly("staging", &StagerStatus);
  m.def("restore_step_planned", &RestoreStepPlannedPy, py::arg("directory"), py::arg("step"),
        py::arg("key"), py::arg("plan"), py::kw_only(), py::arg("threads") = 0,
        "Restores directory/<step> without a Checkpointer, copying each item plan(step, key) "
        "names to its destination as soon as it verifies.");
  m.def("copy_to_host", &CopyToHostPy, py::arg("sources"), py::arg("sizes"), py::arg("devices"),
        py::arg("destinations"), py::kw_only(), py::arg("streams") = py::none(),
        "Copies each source's bytes to host memory at its destination (device sources on a "
        "stream per device after the stream given for it); returns when all are done.");
  m.def(
      "page_lock",
      [](uintptr_t address, size_t nbytes) {
        ThrowIfError(
            WithoutGil([&] { return PageLock(reinterpret_cast<void*>(address), nbytes); }));
      },
      py::arg("address"), py::arg("nbytes"),
      "Page-locks nbytes of host memory at address for every CUDA device (cudaHostRegister); "
      "page_unlock(address) releases it.");
  m.def(
      "page_unlock",
      [](uintptr_t address) { WithoutGil([&] { PageUnlock(reinterpret_cast<void*>(address)); }); },
      py::arg("address"));
  m.def("restore_step_items", &RestoreStepItemsPy, py::arg("directory"), py::arg("step"),
        py::arg("names"), py::kw_only(), py::arg("threads") = 0,
        "Reads and verifies only the named items of directory/<step>.");
}

}  // namespace strata::python
