// Copyright 2026 The Strata Authors.
//
// What the binding's files share: how a Status becomes a Python exception,
// running without the GIL, and the object behind strata.Checkpointer (which
// also owns the stager of strata.torch's saves, python/src/stager.cc).
#ifndef STRATA_PYTHON_SRC_BINDING_H_
#define STRATA_PYTHON_SRC_BINDING_H_

#include <pybind11/pybind11.h>

#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "buffers.h"
#include "strata/checkpointer.h"
#include "strata/cuda.h"

namespace strata::python {
namespace py = pybind11;

// A non-OK status on its way to Python.
struct StatusException {
  Status status;
};

[[noreturn]] inline void Raise(const Status& s) { throw StatusException{s}; }
void RaisePending();
inline void ThrowIfError(const Status& s) {
  RaisePending();
  if (!s.ok()) Raise(s);
}

// Runs `f` with the GIL released; `f` must not touch Python objects.
template <typename F>
auto WithoutGil(F&& f) {
  py::gil_scoped_release release;
  return f();
}

// A Python exception set while the GIL was released and retaken (by an
// interrupt check) wins over the status it caused.
inline void RaisePending() {
  if (PyErr_Occurred() != nullptr) throw py::error_already_set();
}

template <typename T>
T ValueOrRaise(StatusOr<T>&& v) {
  RaisePending();
  if (!v.ok()) Raise(v.status());
  return std::move(*v);
}

// The Python object behind strata.Checkpointer. Save, Wait, Restore* and
// Close run one at a time (op_mu_, taken with the GIL released), as the C++
// contract asks; a Close waits for the call in flight instead of freeing
// the checkpointer under it. ShouldSave, status and RequestOnDemand take
// only ptr_mu_, held for a pointer check, so they never wait for a save.
class PyCheckpointer {
 public:
  explicit PyCheckpointer(std::unique_ptr<Checkpointer> c)
      : ckpt_(std::move(c)), dir_(ckpt_->dir()) {}
  ~PyCheckpointer() { Close(); }

  // Runs fn(checkpointer) with the GIL released, after any call in flight.
  template <typename F>
  auto Run(F&& fn) {
    py::gil_scoped_release release;
    std::lock_guard<std::mutex> op(op_mu_);
    Checkpointer* c = nullptr;
    {
      std::lock_guard<std::mutex> l(ptr_mu_);
      c = ckpt_.get();
    }
    using R = decltype(fn(*c));
    if (c == nullptr) return R(Closed());
    return fn(*c);
  }
  // Runs a quick, thread-safe call with the GIL held.
  template <typename F>
  auto Quick(F&& fn) {
    std::lock_guard<std::mutex> l(ptr_mu_);
    if (!ckpt_) Raise(Closed());
    return fn(*ckpt_);
  }
  // Waits until no save is in flight (or the checkpointer is closed)
  // without taking op_mu_, so that a wait() from another thread holds the
  // training thread's calls (the pre-step hook's ordering, the next save)
  // only for the moment it takes the result. Close() frees the checkpointer
  // only after such waits returned. GIL released. False if it was closed
  // already.
  bool AwaitIdleUnlocked() {
    py::gil_scoped_release release;
    Checkpointer* c = nullptr;
    {
      std::lock_guard<std::mutex> l(ptr_mu_);
      if (!ckpt_) return false;
      c = ckpt_.get();
      ++idle_waiters_;
    }
    c->AwaitIdle();  // thread-safe beside the training thread's calls
    std::lock_guard<std::mutex> l(ptr_mu_);
    if (--idle_waiters_ == 0) waiters_done_.notify_all();
    return true;
  }
  // Whether Close() has begun (it holds op_mu_ until the save in flight is
  // done, so a call waiting behind it finds the copies done and this true).
  bool closed() {
    std::lock_guard<std::mutex> l(ptr_mu_);
    return ckpt_ == nullptr;
  }
  // Waits for the call and the save in flight (a failed save is logged) and
  // unlocks the directory. Idempotent.
  void Close() {
    {
      py::gil_scoped_release release;
      std::lock_guard<std::mutex> op(op_mu_);
      std::unique_ptr<CudaStager> s;
      std::unique_ptr<Checkpointer> c;
      {
        std::lock_guard<std::mutex> l(ptr_mu_);
        s = std::move(stager_);
        c = std::move(ckpt_);
      }
      s.reset();  // before the checkpointer it saves through
      {
        // AwaitIdleUnlocked's callers return once the save in flight is
        // done (the stager, if any, has just waited for it).
        std::unique_lock<std::mutex> l(ptr_mu_);
        waiters_done_.wait(l, [&] { return idle_waiters_ == 0; });
      }
      c.reset();
    }
    lent_.clear();  // no save is in flight any more
  }

  // The stager over this checkpointer (strata.torch's saves and restores),
  // opened on first use: with CUDA where the process has it, else for host
  // buffers only. Called inside Run() (op_mu_ held, GIL released).
  StatusOr<CudaStager*> Stager(Checkpointer& c) {
    if (!stager_) {
      CudaStagerOptions options;
      options.allow_host_only = true;
      options.reserve_after_restore = false;  // strata.torch reserves what it will save
      auto opened = CudaStager::Open(&c, options);
      if (!opened.ok()) return opened.status();
      std::lock_guard<std::mutex> l(ptr_mu_);
      stager_ = std::move(*opened);
    }
    return stager_.get();
  }
  // The stager's status; nullopt before it is opened. Quick (GIL held).
  std::optional<CudaStagerStatus> StagerStatus() {
    std::lock_guard<std::mutex> l(ptr_mu_);
    if (!stager_) return std::nullopt;
    return stager_->status();
  }
  const std::string& dir() const { return dir_; }

  // What a borrowed save reads after save() returned: its buffers and its
  // `ready` callable, held (GIL held) until no save is in flight.
  struct Lent {
    HeldBuffers held;
    py::object ready;
  };
  void Lend(Lent lent) { lent_.push_back(std::move(lent)); }
  // Drops what finished saves borrowed. Called with the GIL held after each
  // operation; keeps everything while any save is in flight (at most the
  // previous save's and the current one's).
  void ReleaseLent() {
    if (lent_.empty()) return;
    bool in_flight = false;
    {
      std::lock_guard<std::mutex> l(ptr_mu_);
      in_flight = ckpt_ && ckpt_->status().in_flight_step.has_value();
    }
    if (!in_flight) lent_.clear();
  }

 private:
  Status Closed() const {
    return FailedPreconditionError("the checkpointer for " + dir_ + " is closed");
  }

  std::mutex op_mu_;
  std::mutex ptr_mu_;
  std::condition_variable waiters_done_;  // idle_waiters_ fell to 0
  int idle_waiters_ = 0;                  // GUARDED_BY(ptr_mu_): in AwaitIdleUnlocked()
  std::unique_ptr<Checkpointer> ckpt_;    // GUARDED_BY(ptr_mu_) for reads and writes
  // Written with op_mu_ and ptr_mu_ held; read with either.
  std::unique_ptr<CudaStager> stager_;
  const std::string dir_;
  std::vector<Lent> lent_;  // touched only with the GIL held
};

inline bool PythonIsExiting() {
#if PY_VERSION_HEX >= 0x030D0000
  return Py_IsFinalizing() != 0;
#else
  return _Py_IsFinalizing() != 0;
#endif
}

// `ready` as SaveOptions::ready: calls the Python callable with the GIL
// taken, on whichever thread the engine calls it from. The callable is kept
// alive by PyCheckpointer::Lent, so this holds a plain pointer. A Python
// exception becomes FAILED_PRECONDITION with its message; while the
// interpreter exits nothing is called and the save fails.
inline std::function<Status()> ReadyGate(PyObject* callable) {
  return [callable]() -> Status {
    if (PythonIsExiting()) {
      return CancelledError("the interpreter is exiting before the buffers were confirmed ready");
    }
    py::gil_scoped_acquire gil;
    try {
      py::handle fn(callable);
      fn();
      return Status::Ok();
    } catch (py::error_already_set& e) {
      return FailedPreconditionError(std::string("the buffers are not ready: ") + e.what());
    }
  };
}

// Defines strata.Batch and the stager's methods of strata.Checkpointer
// (python/src/stager.cc).
void DefineStager(py::module_& m, py::class_<PyCheckpointer>& checkpointer);
// committed_steps, agent_store_copies, backup_commits (layouts.cc).
void DefineLayouts(py::module_& m);

}  // namespace strata::python

#endif  // STRATA_PYTHON_SRC_BINDING_H_
