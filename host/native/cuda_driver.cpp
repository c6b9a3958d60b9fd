// Loads the CUDA driver library at run time and resolves the entry points the engine uses.
#include "cuda_driver.h"

#include <dlfcn.h>

#include <cstdlib>
#include <mutex>

namespace arkdma::cuda {

std::string Driver::describe(const char* call, CUresult rc) const {
  const char* name = nullptr;
  if (cuGetErrorName == nullptr || cuGetErrorName(rc, &name) != CUDA_SUCCESS || name == nullptr) {
    return std::string(call) + ": CUDA error " + std::to_string(rc);
  }
  return std::string(call) + ": " + name;
}

namespace {

Driver g_driver;
std::string g_error;
std::once_flag g_once;

void load_once() {
  const char* override_path = std::getenv("ARKDMA_LIBCUDA");
  const std::string path = override_path && *override_path ? override_path : "libcuda.so.1";
  void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    const char* why = dlerror();
    g_error = "the CUDA executor needs an NVIDIA driver (" + path + " could not be loaded: " +
              (why ? why : "unknown reason") + "); use engine software-host";
    return;
  }
  Driver d;
  d.handle = handle;
  d.path = path;
#define ARKDMA_CUDA_RESOLVE(name, symbol, type)                                               \
  d.name = reinterpret_cast<Driver::PFN_##name>(dlsym(handle, symbol));                                    \
  if (d.name == nullptr) {                                                                    \
    g_error = path + " lacks " symbol ": the NVIDIA driver is too old for CUDA 13 (update it)"; \
    return;                                                                                   \
  }
  ARKDMA_CUDA_FUNCTIONS(ARKDMA_CUDA_RESOLVE)
#undef ARKDMA_CUDA_RESOLVE
  d.cuMemcpyBatchAsync = reinterpret_cast<PFN_cuMemcpyBatchAsync>(dlsym(handle, "cuMemcpyBatchAsync_v2"));
  CUresult rc = d.cuInit(0);
  if (rc != CUDA_SUCCESS) {
    g_error = d.describe("cuInit", rc) + " (is an NVIDIA GPU present and its driver loaded?)";
    return;
  }
  g_driver = d;
}

}  // namespace

const Driver* load_driver(std::string& error) {
  std::call_once(g_once, load_once);
  if (g_driver.handle == nullptr) {
    error = g_error;
    return nullptr;
  }
  return &g_driver;
}

}  // namespace arkdma::cuda
