// Copyright 2026 The Strata Authors.
#include "engine/cuda_runtime.h"

#include <dlfcn.h>

#include <cstdlib>
#include <vector>

#include <fmt/format.h>

namespace strata::cuda {

StatusOr<std::unique_ptr<Runtime>> Runtime::Load(std::string_view library) {
  std::vector<std::string> candidates;
  if (!library.empty()) {
    candidates.emplace_back(library);
  } else if (const char* env = std::getenv("STRATA_CUDART"); env != nullptr && *env != '\0') {
    candidates.emplace_back(env);
  } else {
    candidates = {"libcudart.so", "libcudart.so.13", "libcudart.so.12", "libcudart.so.11.0"};
  }
  std::string tried;
  for (const std::string& name : candidates) {
    void* handle = dlopen(name.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (handle == nullptr) {
      const char* why = dlerror();
      tried += fmt::format("{}{} ({})", tried.empty() ? "" : "; ", name, why ? why : "not found");
      continue;
    }
    std::unique_ptr<Runtime> rt(new Runtime());
    rt->path_ = name;
    bool missing = false;
    auto resolve = [&](auto*& fn, const char* symbol) {
      fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(dlsym(handle, symbol));
      if (fn == nullptr) {
        tried += fmt::format("{}{} lacks {}", tried.empty() ? "" : "; ", name, symbol);
        missing = true;
      }
    };
#define STRATA_CUDA_RESOLVE(name, params) resolve(rt->name, #name);
    STRATA_CUDA_CALLS(STRATA_CUDA_RESOLVE)
#undef STRATA_CUDA_RESOLVE
    resolve(rt->cudaGetErrorString, "cudaGetErrorString");
    if (!missing) return rt;
    // Stays loaded: another part of the process may use it.
  }
  return UnavailableError("CUDA runtime not loaded: tried " + tried);
}

Status Runtime::Check(int error, std::string_view call, std::string_view what) const {
  if (error == 0) return Status();
  const char* message = cudaGetErrorString ? cudaGetErrorString(error) : nullptr;
  return InternalError(fmt::format("CUDA {} ({}): {} [{}]", call, what,
                                   message ? message : "unknown error", error));
}

}  // namespace strata::cuda
