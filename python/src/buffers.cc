// Copyright 2026 The Strata Authors.
#include "buffers.h"

#include <algorithm>
#include <bit>
#include <cstring>
#include <string_view>
#include <unordered_map>
#include <utility>

#include "binding.h"
#include "engine/staging.h"
#include "util/thread_pool.h"

namespace strata::python {
namespace py = pybind11;

namespace {

std::optional<DType> IntOfSize(py::ssize_t size, bool is_signed) {
  switch (size) {
    case 1:
      return is_signed ? DType::kInt8 : DType::kUInt8;
    case 2:
      return is_signed ? DType::kInt16 : DType::kUInt16;
    case 4:
      return is_signed ? DType::kInt32 : DType::kUInt32;
    case 8:
      return is_signed ? DType::kInt64 : DType::kUInt64;
    default:
      return std::nullopt;
  }
}

bool IsCContiguous(const py::buffer_info& info) {
  py::ssize_t expected = info.itemsize;
  for (py::ssize_t d = info.ndim - 1; d >= 0; --d) {
    if (info.shape[d] == 0) return true;
    if (info.shape[d] != 1 && info.strides[d] != expected) return false;
    expected *= info.shape[d];
  }
  return true;
}

// Splits a value into its buffer object and the dtype asked for, if any.
std::pair<py::handle, std::optional<DType>> SplitValue(const std::string& name,
                                                       const py::handle& value) {
  if (!py::isinstance<py::tuple>(value)) return {value, std::nullopt};
  auto pair = py::reinterpret_borrow<py::tuple>(value);
  if (pair.size() != 2 || !py::isinstance<py::str>(pair[1])) {
    throw py::type_error("item '" + name + "': a tuple value must be (buffer, dtype name)");
  }
  std::string dtype_name = pair[1].cast<std::string>();
  std::optional<DType> dtype = ParseDType(dtype_name);
  if (!dtype) throw py::value_error("item '" + name + "': unknown dtype '" + dtype_name + "'");
  return {pair[0], dtype};
}

py::buffer_info Request(const std::string& name, const py::handle& obj, bool writable) {
  if (!PyObject_CheckBuffer(obj.ptr())) {
    throw py::type_error("item '" + name +
                         "': " + std::string(py::str(py::type::handle_of(obj).attr("__name__"))) +
                         " does not support the buffer protocol (pass a NumPy array, bytes, "
                         "a memoryview, or tensor.numpy(); strata.torch does this for tensors)");
  }
  py::buffer_info info;
  try {
    info = py::reinterpret_borrow<py::buffer>(obj).request(writable);
  } catch (py::error_already_set& e) {
    throw py::value_error("item '" + name + "': " + (writable ? "not a writable buffer: " : "") +
                          e.what());
  }
  if (!IsCContiguous(info)) {
    throw py::value_error("item '" + name +
                          "': the buffer is not C-contiguous (numpy.ascontiguousarray or "
                          "tensor.contiguous() makes it so)");
  }
  return info;
}

// The dtype and shape an item is saved with.
std::pair<DType, std::vector<int64_t>> Describe(const std::string& name,
                                                const py::buffer_info& info,
                                                std::optional<DType> asked) {
  const uint64_t nbytes = static_cast<uint64_t>(info.size * info.itemsize);
  if (asked == DType::kBytes) return {DType::kBytes, {static_cast<int64_t>(nbytes)}};
  std::vector<int64_t> shape(info.shape.begin(), info.shape.end());
  if (asked) {
    if (DTypeSize(*asked) != static_cast<size_t>(info.itemsize)) {
      throw py::value_error("item '" + name + "': dtype " + std::string(DTypeName(*asked)) +
                            " has " + std::to_string(DTypeSize(*asked)) +
                            "-byte elements but the buffer's are " + std::to_string(info.itemsize) +
                            " bytes");
    }
    return {*asked, shape};
  }
  std::optional<DType> dtype = DTypeOfFormat(info.format, info.itemsize);
  if (!dtype) {
    throw py::value_error("item '" + name + "': buffer format '" + info.format +
                          "' has no Strata dtype (pass (value, 'bytes') to save its bytes)");
  }
  return {*dtype, shape};
}

// The NumPy dtype that holds a Strata dtype's elements.
const char* NumpyTypeOf(DType dtype) {
  switch (dtype) {
    case DType::kBool:
      return "?";
    case DType::kInt8:
      return "i1";
    case DType::kUInt8:
    case DType::kBytes:
      return "u1";
    case DType::kInt16:
      return "i2";
    case DType::kUInt16:
    case DType::kBFloat16:  // bit patterns; strata.torch views them as bfloat16
      return "u2";
    case DType::kInt32:
      return "i4";
    case DType::kUInt32:
      return "u4";
    case DType::kInt64:
      return "i8";
    case DType::kUInt64:
      return "u8";
    case DType::kFloat16:
      return "f2";
    case DType::kFloat32:
      return "f4";
    case DType::kFloat64:
      return "f8";
  }
  return "u1";
}

}  // namespace

std::optional<DType> DTypeOfFormat(const std::string& format, py::ssize_t itemsize) {
  std::string_view f(format);
  // '<' is little-endian, which is the native order of every supported host.
  static_assert(std::endian::native == std::endian::little, "big-endian hosts: handle '>' and '<'");
  if (!f.empty() && (f[0] == '@' || f[0] == '=' || f[0] == '<')) f.remove_prefix(1);
  if (f.size() != 1) return std::nullopt;  // big-endian, structs, strings, complex
  switch (f[0]) {
    case '?':
      return itemsize == 1 ? std::optional(DType::kBool) : std::nullopt;
    case 'b':
    case 'h':
    case 'i':
    case 'l':
    case 'q':
    case 'n':
      return IntOfSize(itemsize, true);
    case 'B':
    case 'H':
    case 'I':
    case 'L':
    case 'Q':
    case 'N':
      return IntOfSize(itemsize, false);
    case 'e':
      return itemsize == 2 ? std::optional(DType::kFloat16) : std::nullopt;
    case 'f':
      return itemsize == 4 ? std::optional(DType::kFloat32) : std::nullopt;
    case 'd':
      return itemsize == 8 ? std::optional(DType::kFloat64) : std::nullopt;
    default:
      return std::nullopt;
  }
}

HeldBuffers HeldBuffers::FromPython(const py::handle& items, bool writable) {
  py::object pairs = py::isinstance<py::dict>(items) || py::hasattr(items, "items")
                         ? items.attr("items")()
                         : py::reinterpret_borrow<py::object>(items);
  HeldBuffers held;
  for (py::handle pair : pairs) {
    auto kv = pair.cast<py::tuple>();
    if (kv.size() != 2 || !py::isinstance<py::str>(kv[0])) {
      throw py::type_error("items must map str names to buffers");
    }
    std::string name = kv[0].cast<std::string>();
    auto [obj, asked] = SplitValue(name, kv[1]);
    held.infos_.push_back(Request(name, obj, writable));
    const py::buffer_info& info = held.infos_.back();
    auto [dtype, shape] = Describe(name, info, asked);
    held.items_.push_back(Item{name, dtype, std::move(shape), info.ptr,
                               static_cast<size_t>(info.size * info.itemsize)});
  }
  return held;
}

std::vector<MutableItem> HeldBuffers::mutable_items() const {
  std::vector<MutableItem> out;
  out.reserve(items_.size());
  for (const Item& it : items_) {
    out.push_back({it.name, it.dtype, it.shape, const_cast<void*>(it.data), it.size});
  }
  return out;
}

PyRestored ToPython(RestoredStep&& restored, py::object memory_owner) {
  auto owner = std::make_shared<RestoredStep>(std::move(restored));
  // The capsule owns one reference to the step; every array holds the capsule
  // (or, for the caller's memory, the object that owns it).
  py::object base = memory_owner;
  if (!base) {
    base = py::capsule(new std::shared_ptr<RestoredStep>(owner),
                       [](void* p) { delete static_cast<std::shared_ptr<RestoredStep>*>(p); });
  }
  // Lent: the arrays view step files, a slot's (a later save writes them)
  // or a mapping of a step's own (held from recycling while it lives: what
  // is kept is copied, so that the files are let go once the restore ends).
  const bool lent = !memory_owner && owner->storage &&
                    (!owner->storage.get_deleter().owned || owner->hold != nullptr);
  return PyRestored(std::move(owner), std::move(base), lent);
}

const py::dict& PyRestored::items() {
  if (!items_) MakeArrays();
  return *items_;
}

const py::dict& PyRestored::dtypes() {
  if (!dtypes_) MakeArrays();
  return *dtypes_;
}

namespace {

// The array of item `it` with its bytes at `data`, keeping `base` alive.
py::array ArrayOf(const RestoredItem& it, void* data, const py::object& base) {
  std::vector<py::ssize_t> shape(it.shape.begin(), it.shape.end());
  if (it.dtype == DType::kBytes) shape = {static_cast<py::ssize_t>(it.data.size())};
  std::vector<py::ssize_t> strides(shape.size());
  py::ssize_t stride =
      it.dtype == DType::kBytes ? 1 : static_cast<py::ssize_t>(DTypeSize(it.dtype));
  for (size_t d = shape.size(); d-- > 0;) {
    strides[d] = stride;
    stride *= shape[d];
  }
  return py::array(py::dtype(NumpyTypeOf(it.dtype)), shape, strides, data, base);
}

}  // namespace

void PyRestored::MakeArrays() {
  py::dict items, dtypes;
  for (const RestoredItem& it : step_->items) {
    items[py::str(it.name)] = ArrayOf(it, it.data.data(), base_);
    dtypes[py::str(it.name)] = py::str(std::string(DTypeName(it.dtype)));
  }
  items_ = std::move(items);
  dtypes_ = std::move(dtypes);
}

py::dict PyRestored::OwnedCopy(const std::vector<std::string>& names) {
  std::unordered_map<std::string_view, const RestoredItem*> by_name;
  for (const RestoredItem& it : step_->items) by_name.emplace(it.name, &it);
  std::vector<const RestoredItem*> chosen;
  std::vector<size_t> offset;
  size_t total = 0;
  for (const std::string& name : names) {
    auto found = by_name.find(name);
    if (found == by_name.end()) continue;
    chosen.push_back(found->second);
    offset.push_back(total);
    total += (found->second->data.size() + 63) / 64 * 64;  // each item cache-line aligned
  }
  auto block =
      AllocateRestoreMemory(total, "step " + std::to_string(step_->step) + "'s kept items");
  if (!block.ok()) ThrowIfError(block.status());
  std::byte* base = block->get();
  {
    // In pieces of 8 MiB across the pool: the copy is mostly page faults
    // on the new block, which threads take in parallel.
    constexpr size_t kPiece = size_t{8} << 20;
    std::vector<std::pair<size_t, size_t>> pieces;  // (chosen index, offset in the item)
    for (size_t i = 0; i < chosen.size(); ++i) {
      for (size_t at = 0; at < chosen[i]->data.size(); at += kPiece) pieces.emplace_back(i, at);
    }
    py::gil_scoped_release unlocked;
    ThreadPool pool(total >= 2 * kPiece ? ThreadPool::DefaultThreads() - 1 : 0);
    pool.ParallelFor(pieces.size(), [&](size_t p) {
      const auto [i, at] = pieces[p];
      const size_t n = std::min(kPiece, chosen[i]->data.size() - at);
      std::memcpy(base + offset[i] + at, chosen[i]->data.data() + at, n);
    });
  }
  auto owner =
      std::make_shared<std::unique_ptr<std::byte[], RestoredMemoryDeleter>>(std::move(*block));
  py::capsule keep(new decltype(owner)(owner),
                   [](void* p) { delete static_cast<decltype(owner)*>(p); });
  py::dict out;
  for (size_t i = 0; i < chosen.size(); ++i) {
    out[py::str(chosen[i]->name)] = ArrayOf(*chosen[i], base + offset[i], keep);
  }
  return out;
}

}  // namespace strata::python
