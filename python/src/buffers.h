// Copyright 2026 The Strata Authors.
//
// Between Python objects and Strata items: buffer-protocol objects become
// Items without a copy, restored memory becomes NumPy arrays without a copy.
#ifndef STRATA_PYTHON_SRC_BUFFERS_H_
#define STRATA_PYTHON_SRC_BUFFERS_H_

#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "strata/checkpointer.h"
#include "strata/types.h"

namespace strata::python {

// The buffers of one Save() or RestoreInto() call. Holds each Python
// buffer (and so the object's memory) until destroyed, which must happen
// with the GIL held; items()/mutable_items() may be used without it.
class HeldBuffers {
 public:
  // `items` is a mapping name -> value, or an iterable of (name, value)
  // pairs. A value is a C-contiguous buffer-protocol object, or a pair
  // (object, dtype name) whose dtype replaces the one the buffer format
  // implies (same element size; "bytes" takes any buffer as its bytes).
  // Throws ValueError/TypeError naming the item.
  static HeldBuffers FromPython(const pybind11::handle& items, bool writable);

  const std::vector<Item>& items() const { return items_; }
  std::vector<MutableItem> mutable_items() const;

 private:
  std::vector<pybind11::buffer_info> infos_;
  std::vector<Item> items_;
};

// The Strata dtype for a buffer format and item size, if there is one.
std::optional<DType> DTypeOfFormat(const std::string& format, pybind11::ssize_t itemsize);

// A restored step as NumPy arrays that share the step's memory (kept alive
// by the arrays and by this object). bfloat16 items come back as uint16
// arrays holding the bit patterns, opaque bytes as uint8; `dtypes` keeps the
// Strata name of each. The arrays are made when `items` or `dtypes` is first
// read: a restore that copied every item into place reads neither, and
// making an array per item was a restore's largest cost per item in C++.
class PyRestored {
 public:
  // `base`: what every array keeps alive (it keeps the step's memory).
  PyRestored(std::shared_ptr<RestoredStep> step, pybind11::object base, bool lent)
      : step_(std::move(step)), base_(std::move(base)), lent_(lent) {}

  int64_t step() const { return step_->step; }
  size_t size() const { return step_->items.size(); }
  // The arrays are views of step files: a slot's (reused by a later save)
  // or a mapping of the step's own (kept from recycling while held): copy
  // what is kept.
  bool lent() const { return lent_; }
  const pybind11::dict& items();   // name -> numpy.ndarray
  const pybind11::dict& dtypes();  // name -> Strata dtype name
  // name -> an array of the named item over memory of its own: the named
  // items copied, in parallel, into one new block (an anonymous mapping with
  // transparent huge pages, freed with the last of its arrays). What is kept
  // of a lent step (a restore's plain values) outlives the step files then,
  // at the cost of one pass and not of a page fault and an allocation per
  // tensor. A name the step lacks is left out (the caller's decoder names
  // it as missing, with the step).
  pybind11::dict OwnedCopy(const std::vector<std::string>& names);

 private:
  void MakeArrays();

  std::shared_ptr<RestoredStep> step_;
  pybind11::object base_;
  bool lent_;
  std::optional<pybind11::dict> items_, dtypes_;
};
PyRestored ToPython(RestoredStep&& restored, pybind11::object owner = pybind11::object());

}  // namespace strata::python

#endif  // STRATA_PYTHON_SRC_BUFFERS_H_
