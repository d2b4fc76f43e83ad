// Copyright 2026 The Strata Authors.
#include "engine/cuda_runtime.h"

#include <dlfcn.h>
#include <fmt/format.h>

#include <cstdlib>
#include <vector>

namespace strata::cuda {
namespace {

// Resolves every call of `rt` in `handle`; false (`why` says which symbol
// is missing) when one is not there.
bool Resolve(void* handle, const std::string& name, Runtime* rt, std::string* why) {
  bool missing = false;
  auto resolve = [&](auto*& fn, const char* symbol) {
    fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(dlsym(handle, symbol));
    if (fn == nullptr && !missing) {
      *why = name + " lacks " + symbol;
      missing = true;
    }
  };
#define STRATA_CUDA_RESOLVE(call, params) resolve(rt->call, #call);
  STRATA_CUDA_CALLS(STRATA_CUDA_RESOLVE)
#undef STRATA_CUDA_RESOLVE
  resolve(rt->cudaGetErrorString, "cudaGetErrorString");
  resolve(rt->cudaGetLastError, "cudaGetLastError");
  return !missing;
}

using PrimaryCtxStateFn = int (*)(int, unsigned*, int*);

// cuDevicePrimaryCtxGetState from the runtime's library `handle`, else from
// the driver already loaded; null when neither has it, or when the runtime
// is older than CUDA 12: there cudaSetDevice makes no context, so a thread's
// device is always safe to restore (DeviceGuard).
PrimaryCtxStateFn PrimaryCtxState(void* handle) {
  auto version_of = reinterpret_cast<int (*)(int*)>(dlsym(handle, "cudaRuntimeGetVersion"));
  if (int version = 0; version_of == nullptr || version_of(&version) != 0 || version < 12000) {
    dlerror();
    return nullptr;
  }
  void* fn = dlsym(handle, "cuDevicePrimaryCtxGetState");
  if (fn == nullptr) {
    if (void* driver = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL | RTLD_NOLOAD)) {
      fn = dlsym(driver, "cuDevicePrimaryCtxGetState");  // the driver stays loaded
    }
  }
  dlerror();  // a missing symbol is not an error here
  return reinterpret_cast<PrimaryCtxStateFn>(fn);
}

}  // namespace

std::optional<bool> Runtime::PrimaryContextMade(int device) const {
  if (primary_ctx_state_ == nullptr || device < 0) return std::nullopt;
  // The driver's CUdevice for runtime device d is d: cuDeviceGet(&dev, d)
  // returns d in every driver, and torch's hasPrimaryContext passes d too.
  unsigned flags = 0;
  int active = 0;
  if (primary_ctx_state_(device, &flags, &active) != 0) return std::nullopt;
  return active != 0;
}

StatusOr<std::unique_ptr<Runtime>> Runtime::Load(std::string_view library) {
  std::vector<std::string> candidates;
  if (!library.empty()) {
    candidates.emplace_back(library);
  } else if (const char* env = std::getenv("STRATA_CUDART"); env != nullptr && *env != '\0') {
    candidates.emplace_back(env);
  } else {
    candidates = {"libcudart.so.13", "libcudart.so.12", "libcudart.so.11.0", "libcudart.so"};
  }
  std::string tried;
  auto note = [&](const std::string& what) { tried += (tried.empty() ? "" : "; ") + what; };
  std::unique_ptr<Runtime> fallback;  // loads, but sees no device
  // First a runtime the process already loaded (a framework's), then any.
  for (int flags : {RTLD_NOW | RTLD_LOCAL | RTLD_NOLOAD, RTLD_NOW | RTLD_LOCAL}) {
    for (const std::string& name : candidates) {
      void* handle = dlopen(name.c_str(), flags);
      if (handle == nullptr) {
        if ((flags & RTLD_NOLOAD) == 0) {
          const char* why = dlerror();
          note(name + " (" + (why ? why : "not found") + ")");
        }
        continue;
      }
      std::string why;
      std::unique_ptr<Runtime> rt(new Runtime());
      if (!Resolve(handle, name, rt.get(), &why)) {  // stays loaded: others may use it
        note(why);
        continue;
      }
      rt->path_ = name;
      int count = 0;
      const int err = rt->cudaGetDeviceCount(&count);  // loads the driver
      rt->primary_ctx_state_ = PrimaryCtxState(handle);
      if (err == 0 && count > 0) return rt;
      // E.g. a toolkit newer than the driver: another runtime may do.
      note(name + " sees no device (" + rt->Check(err, "cudaGetDeviceCount", name).message() + ")");
      if (fallback == nullptr) fallback = std::move(rt);
    }
  }
  if (fallback != nullptr) return fallback;
  return UnavailableError("CUDA runtime not loaded: tried " + tried);
}

Status Runtime::Check(int error, std::string_view call, std::string_view what) const {
  if (error == 0) return Status();
  if (cudaGetLastError != nullptr) cudaGetLastError();
  const char* message = cudaGetErrorString ? cudaGetErrorString(error) : nullptr;
  return InternalError(
      fmt::format("CUDA {} ({}): {} [{}]", call, what, message ? message : "unknown error", error));
}

}  // namespace strata::cuda
