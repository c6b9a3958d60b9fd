// The few CUDA driver API types and functions the CUDA executor uses, loaded from libcuda.so.1
// at run time, so the engine builds with only a C++ compiler (no CUDA toolkit).
// Names and values follow cuda.h (CUDA 13); tests/host/test_cuda_declarations.py compares every
// declaration and value with the real header where a CUDA toolkit is installed.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace arkdma::cuda {

#if defined(ARKDMA_CHECK_AGAINST_CUDA_H)
// The test's translation unit includes cuda.h first: the table then uses its types, so every
// function pointer type can be compared with the real declaration exactly.
using CUresult = ::CUresult;
using CUdevice = ::CUdevice;
using CUdeviceptr = ::CUdeviceptr;
using CUcontext = ::CUcontext;
using CUstream = ::CUstream;
using CUevent = ::CUevent;
using CUdevice_attribute = ::CUdevice_attribute;
using CUpointer_attribute = ::CUpointer_attribute;
using CUmemcpyAttributes = ::CUmemcpyAttributes;
#else
using CUresult = int;  // cuda.h: an enum whose values fit an int
using CUdevice = int;
using CUdeviceptr = unsigned long long;
using CUcontext = struct CUctx_st*;
using CUstream = struct CUstream_st*;
using CUevent = struct CUevent_st*;
using CUdevice_attribute = int;
using CUpointer_attribute = int;

struct CUmemLocation {
  int type;
  int id;
};

struct CUmemcpyAttributes {
  int srcAccessOrder;
  CUmemLocation srcLocHint;
  CUmemLocation dstLocHint;
  unsigned int flags;
};
#endif

constexpr int CUDA_SUCCESS = 0;
constexpr int CUDA_ERROR_NOT_READY = 600;

constexpr unsigned MEMHOSTALLOC_PORTABLE = 0x01;  // CU_MEMHOSTALLOC_PORTABLE (a macro in cuda.h)
constexpr unsigned MEMHOSTALLOC_DEVICEMAP = 0x02;  // CU_MEMHOSTALLOC_DEVICEMAP
constexpr unsigned CU_STREAM_NON_BLOCKING = 0x1;
constexpr unsigned CU_EVENT_DISABLE_TIMING = 0x2;
constexpr unsigned CU_STREAM_WRITE_VALUE_DEFAULT = 0x0;
constexpr int CU_DEVICE_ATTRIBUTE_CAN_USE_64_BIT_STREAM_MEM_OPS = 122;
constexpr int CU_POINTER_ATTRIBUTE_MEMORY_TYPE = 2;
constexpr int CU_MEMCPY_SRC_ACCESS_ORDER_STREAM = 0x1;

// One member per driver entry point; `symbol` is the exported name (the _v2 names cuda.h maps to).
#define ARKDMA_CUDA_FUNCTIONS(X)                                                                    \
  X(cuInit, "cuInit", CUresult (*)(unsigned))                                                       \
  X(cuGetErrorName, "cuGetErrorName", CUresult (*)(CUresult, const char**))                         \
  X(cuDeviceGetCount, "cuDeviceGetCount", CUresult (*)(int*))                                       \
  X(cuDeviceGet, "cuDeviceGet", CUresult (*)(CUdevice*, int))                                       \
  X(cuDeviceGetName, "cuDeviceGetName", CUresult (*)(char*, int, CUdevice))                         \
  X(cuDeviceGetPCIBusId, "cuDeviceGetPCIBusId", CUresult (*)(char*, int, CUdevice))                 \
  X(cuDeviceGetAttribute, "cuDeviceGetAttribute", CUresult (*)(int*, CUdevice_attribute, CUdevice)) \
  X(cuDevicePrimaryCtxRetain, "cuDevicePrimaryCtxRetain", CUresult (*)(CUcontext*, CUdevice))       \
  X(cuDevicePrimaryCtxRelease, "cuDevicePrimaryCtxRelease_v2", CUresult (*)(CUdevice))              \
  X(cuCtxSetCurrent, "cuCtxSetCurrent", CUresult (*)(CUcontext))                                    \
  X(cuMemAlloc, "cuMemAlloc_v2", CUresult (*)(CUdeviceptr*, size_t))                                \
  X(cuMemFree, "cuMemFree_v2", CUresult (*)(CUdeviceptr))                                           \
  X(cuMemHostAlloc, "cuMemHostAlloc", CUresult (*)(void**, size_t, unsigned))                       \
  X(cuMemFreeHost, "cuMemFreeHost", CUresult (*)(void*))                                            \
  X(cuMemHostGetDevicePointer, "cuMemHostGetDevicePointer_v2",                                      \
    CUresult (*)(CUdeviceptr*, void*, unsigned))                                                    \
  X(cuPointerGetAttribute, "cuPointerGetAttribute", CUresult (*)(void*, CUpointer_attribute, CUdeviceptr)) \
  X(cuMemcpyHtoD, "cuMemcpyHtoD_v2", CUresult (*)(CUdeviceptr, const void*, size_t))                \
  X(cuMemcpyDtoH, "cuMemcpyDtoH_v2", CUresult (*)(void*, CUdeviceptr, size_t))                      \
  X(cuMemcpyAsync, "cuMemcpyAsync", CUresult (*)(CUdeviceptr, CUdeviceptr, size_t, CUstream))       \
  X(cuStreamCreate, "cuStreamCreate", CUresult (*)(CUstream*, unsigned))                            \
  X(cuStreamDestroy, "cuStreamDestroy_v2", CUresult (*)(CUstream))                                  \
  X(cuStreamWriteValue64, "cuStreamWriteValue64_v2",                                                \
    CUresult (*)(CUstream, CUdeviceptr, uint64_t, unsigned))                                        \
  X(cuStreamWaitEvent, "cuStreamWaitEvent", CUresult (*)(CUstream, CUevent, unsigned))              \
  X(cuEventCreate, "cuEventCreate", CUresult (*)(CUevent*, unsigned))                               \
  X(cuEventDestroy, "cuEventDestroy_v2", CUresult (*)(CUevent))                                     \
  X(cuEventRecord, "cuEventRecord", CUresult (*)(CUevent, CUstream))                                \
  X(cuEventQuery, "cuEventQuery", CUresult (*)(CUevent))

// Optional: a batch of copies in one call (CUDA 12.8+; the _v2 signature is CUDA 13's).
using PFN_cuMemcpyBatchAsync = CUresult (*)(CUdeviceptr*, CUdeviceptr*, size_t*, size_t,
                                            CUmemcpyAttributes*, size_t*, size_t, CUstream);

struct Driver {
#define ARKDMA_CUDA_MEMBER(name, symbol, type) \
  using PFN_##name = type;                      \
  PFN_##name name = nullptr;
  ARKDMA_CUDA_FUNCTIONS(ARKDMA_CUDA_MEMBER)
#undef ARKDMA_CUDA_MEMBER
  PFN_cuMemcpyBatchAsync cuMemcpyBatchAsync = nullptr;
  void* handle = nullptr;
  std::string path;

  // "cuMemcpyAsync: CUDA_ERROR_INVALID_VALUE", for messages.
  std::string describe(const char* call, CUresult rc) const;
};

// The process-wide driver table, loaded on first use from $ARKDMA_LIBCUDA or libcuda.so.1 and
// initialised with cuInit(0). Returns nullptr and sets `error` when it cannot be loaded.
const Driver* load_driver(std::string& error);

}  // namespace arkdma::cuda
