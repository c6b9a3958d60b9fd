// A test double of the CUDA driver library for CI machines without a GPU: the entry points the
// software engine's CUDA executor loads, with "device" memory in host RAM and each stream a worker
// thread that runs its operations in order after a random delay (ARKDMA_FAKE_CUDA_JITTER_US), so
// copies on different streams finish out of order and only the engine's events keep them in line.
// Copies into or out of memory it did not allocate fail with CUDA_ERROR_INVALID_VALUE, like the
// driver's pointer checks; copies inside one cuMemcpyBatchAsync run in reverse order; and a copy of
// exactly ARKDMA_FAKE_CUDA_FAIL_LENGTH bytes is refused (read at each call), to reach the BUS_ERROR path.
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <random>
#include <thread>

namespace {

using CUresult = int;
using CUdeviceptr = unsigned long long;

constexpr CUresult SUCCESS = 0, INVALID_VALUE = 1, NOT_INITIALIZED = 3, INVALID_CONTEXT = 201,
                   INVALID_HANDLE = 400, NOT_READY = 600, NO_DEVICE = 100;

struct Allocation {
  size_t size;
  unsigned type;  // 1 host, 2 device
};

std::mutex g_mu;
std::map<uintptr_t, Allocation> g_allocations;
bool g_initialised = false;
int g_context_token;
thread_local void* t_current = nullptr;

int env_int(const char* name, int fallback) {
  const char* v = std::getenv(name);
  return v && *v ? std::atoi(v) : fallback;
}

const Allocation* find(uintptr_t addr, size_t n, uintptr_t* base = nullptr) {
  std::lock_guard<std::mutex> lock(g_mu);
  auto it = g_allocations.upper_bound(addr);
  if (it == g_allocations.begin()) return nullptr;
  --it;
  if (addr + n > it->first + it->second.size) return nullptr;
  if (base) *base = it->first;
  return &it->second;
}

bool have_context() { return t_current == &g_context_token; }

bool refused(size_t n) { return n != 0 && static_cast<long>(n) == env_int("ARKDMA_FAKE_CUDA_FAIL_LENGTH", -1); }

struct Event {
  std::atomic<uint64_t> recorded{0};
  std::atomic<uint64_t> done{0};
};

class Stream {
 public:
  Stream() : rng_(std::random_device{}()), jitter_us_(env_int("ARKDMA_FAKE_CUDA_JITTER_US", 0)) {
    worker_ = std::thread([this] { run(); });
  }
  ~Stream() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      quit_ = true;
    }
    cv_.notify_all();
    worker_.join();
  }
  void push(std::function<void()> op) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      ops_.push_back(std::move(op));
    }
    cv_.notify_all();
  }

 private:
  void run() {
    for (;;) {
      std::function<void()> op;
      {
        std::unique_lock<std::mutex> lock(mu_);
        cv_.wait(lock, [this] { return quit_ || !ops_.empty(); });
        if (ops_.empty()) return;
        op = std::move(ops_.front());
        ops_.pop_front();
      }
      if (jitter_us_ > 0) {
        std::uniform_int_distribution<int> d(0, jitter_us_);
        std::this_thread::sleep_for(std::chrono::microseconds(d(rng_)));
      }
      op();
    }
  }
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> ops_;
  bool quit_ = false;
  std::mt19937 rng_;
  int jitter_us_;
  std::thread worker_;
};

}  // namespace

extern "C" {

#define API __attribute__((visibility("default")))

API CUresult cuInit(unsigned flags) {
  if (flags != 0) return INVALID_VALUE;
  g_initialised = true;
  return SUCCESS;
}

API CUresult cuGetErrorName(CUresult rc, const char** name) {
  switch (rc) {
    case SUCCESS: *name = "CUDA_SUCCESS"; break;
    case INVALID_VALUE: *name = "CUDA_ERROR_INVALID_VALUE"; break;
    case NOT_INITIALIZED: *name = "CUDA_ERROR_NOT_INITIALIZED"; break;
    case INVALID_CONTEXT: *name = "CUDA_ERROR_INVALID_CONTEXT"; break;
    case INVALID_HANDLE: *name = "CUDA_ERROR_INVALID_HANDLE"; break;
    case NOT_READY: *name = "CUDA_ERROR_NOT_READY"; break;
    case NO_DEVICE: *name = "CUDA_ERROR_NO_DEVICE"; break;
    default: return INVALID_VALUE;
  }
  return SUCCESS;
}

API CUresult cuDeviceGetCount(int* n) {
  if (!g_initialised) return NOT_INITIALIZED;
  *n = env_int("ARKDMA_FAKE_CUDA_DEVICES", 1);
  return SUCCESS;
}

API CUresult cuDeviceGet(int* dev, int ordinal) {
  if (ordinal < 0 || ordinal >= env_int("ARKDMA_FAKE_CUDA_DEVICES", 1)) return INVALID_VALUE;
  *dev = ordinal;
  return SUCCESS;
}

API CUresult cuDeviceGetName(char* name, int len, int) {
  std::strncpy(name, "Fake CUDA device (test double)", len - 1);
  name[len - 1] = '\0';
  return SUCCESS;
}

API CUresult cuDeviceGetPCIBusId(char* bus, int len, int) {
  std::strncpy(bus, "0000:00:00.0", len - 1);
  bus[len - 1] = '\0';
  return SUCCESS;
}

API CUresult cuDeviceGetAttribute(int* value, int attribute, int) {
  *value = attribute == 122 ? env_int("ARKDMA_FAKE_CUDA_MEM_OPS", 1) : 0;
  return SUCCESS;
}

API CUresult cuDevicePrimaryCtxRetain(void** ctx, int) {
  *ctx = &g_context_token;
  return SUCCESS;
}

API CUresult cuDevicePrimaryCtxRelease_v2(int) { return SUCCESS; }

API CUresult cuCtxSetCurrent(void* ctx) {
  t_current = ctx;
  return SUCCESS;
}

static CUresult allocate(void** out, size_t size, unsigned type) {
  if (!have_context()) return INVALID_CONTEXT;
  void* p = std::aligned_alloc(256, (size + 255) / 256 * 256);
  if (!p) return INVALID_VALUE;
  std::lock_guard<std::mutex> lock(g_mu);
  g_allocations[reinterpret_cast<uintptr_t>(p)] = Allocation{size, type};
  *out = p;
  return SUCCESS;
}

static CUresult release(uintptr_t p) {
  std::lock_guard<std::mutex> lock(g_mu);
  auto it = g_allocations.find(p);
  if (it == g_allocations.end()) return INVALID_VALUE;
  g_allocations.erase(it);
  std::free(reinterpret_cast<void*>(p));
  return SUCCESS;
}

API CUresult cuMemAlloc_v2(CUdeviceptr* p, size_t size) {
  void* h = nullptr;
  CUresult rc = allocate(&h, size, 2);
  *p = reinterpret_cast<CUdeviceptr>(h);
  return rc;
}

API CUresult cuMemFree_v2(CUdeviceptr p) { return release(p); }

API CUresult cuMemHostAlloc(void** p, size_t size, unsigned flags) {
  if (flags & ~3u) return INVALID_VALUE;
  return allocate(p, size, 1);
}

API CUresult cuMemFreeHost(void* p) { return release(reinterpret_cast<uintptr_t>(p)); }

API CUresult cuMemHostGetDevicePointer_v2(CUdeviceptr* d, void* h, unsigned) {
  const Allocation* a = find(reinterpret_cast<uintptr_t>(h), 1);
  if (!a || a->type != 1) return INVALID_VALUE;
  *d = reinterpret_cast<CUdeviceptr>(h);
  return SUCCESS;
}

API CUresult cuPointerGetAttribute(void* data, int attribute, CUdeviceptr p) {
  const Allocation* a = find(p, 1);
  if (!a) return INVALID_VALUE;
  if (attribute == 2) {
    *static_cast<unsigned*>(data) = a->type;
    return SUCCESS;
  }
  return INVALID_VALUE;
}

API CUresult cuMemcpyHtoD_v2(CUdeviceptr dst, const void* src, size_t n) {
  if (!have_context()) return INVALID_CONTEXT;
  if (!find(dst, n)) return INVALID_VALUE;
  std::memcpy(reinterpret_cast<void*>(dst), src, n);
  return SUCCESS;
}

API CUresult cuMemcpyDtoH_v2(void* dst, CUdeviceptr src, size_t n) {
  if (!have_context()) return INVALID_CONTEXT;
  if (!find(src, n)) return INVALID_VALUE;
  std::memcpy(dst, reinterpret_cast<const void*>(src), n);
  return SUCCESS;
}

API CUresult cuStreamCreate(void** s, unsigned flags) {
  if (!have_context()) return INVALID_CONTEXT;
  if (flags & ~1u) return INVALID_VALUE;
  *s = new Stream();
  return SUCCESS;
}

API CUresult cuStreamDestroy_v2(void* s) {
  delete static_cast<Stream*>(s);
  return SUCCESS;
}

API CUresult cuMemcpyAsync(CUdeviceptr dst, CUdeviceptr src, size_t n, void* s) {
  if (!have_context()) return INVALID_CONTEXT;
  if (!s) return INVALID_HANDLE;
  if (refused(n) || (n && (!find(dst, n) || !find(src, n)))) return INVALID_VALUE;
  static_cast<Stream*>(s)->push([=] { std::memmove(reinterpret_cast<void*>(dst), reinterpret_cast<void*>(src), n); });
  return SUCCESS;
}

struct MemcpyAttributes {
  int srcAccessOrder;
  int src_type, src_id, dst_type, dst_id;
  unsigned flags;
};

API CUresult cuMemcpyBatchAsync_v2(CUdeviceptr* dsts, CUdeviceptr* srcs, size_t* sizes, size_t count,
                                   MemcpyAttributes* attrs, size_t* attr_idx, size_t nattrs, void* s) {
  if (!have_context()) return INVALID_CONTEXT;
  if (!s || count == 0 || nattrs == 0 || nattrs > count || attr_idx[0] != 0) return INVALID_VALUE;
  for (size_t k = 0; k < nattrs; ++k) {
    if (attrs[k].srcAccessOrder < 1 || attrs[k].srcAccessOrder > 3) return INVALID_VALUE;
  }
  for (size_t i = 0; i < count; ++i) {
    if (sizes[i] == 0 || refused(sizes[i]) || !find(dsts[i], sizes[i]) || !find(srcs[i], sizes[i])) return INVALID_VALUE;
  }
  std::vector<CUdeviceptr> d(dsts, dsts + count), r(srcs, srcs + count);
  std::vector<size_t> n(sizes, sizes + count);
  static_cast<Stream*>(s)->push([d, r, n] {
    for (size_t i = d.size(); i-- > 0;) std::memmove(reinterpret_cast<void*>(d[i]), reinterpret_cast<void*>(r[i]), n[i]);
  });
  return SUCCESS;
}

API CUresult cuStreamWriteValue64_v2(void* s, CUdeviceptr addr, uint64_t value, unsigned flags) {
  if (!have_context()) return INVALID_CONTEXT;
  if (!s || flags != 0 || addr % 8 || !find(addr, 8)) return INVALID_VALUE;
  static_cast<Stream*>(s)->push([=] { __atomic_store_n(reinterpret_cast<uint64_t*>(addr), value, __ATOMIC_RELEASE); });
  return SUCCESS;
}

API CUresult cuEventCreate(void** e, unsigned flags) {
  if (!have_context()) return INVALID_CONTEXT;
  if (flags & ~2u) return INVALID_VALUE;
  *e = new Event();
  return SUCCESS;
}

API CUresult cuEventDestroy_v2(void* e) {
  delete static_cast<Event*>(e);
  return SUCCESS;
}

API CUresult cuEventRecord(void* e, void* s) {
  if (!have_context()) return INVALID_CONTEXT;
  if (!e || !s) return INVALID_HANDLE;
  Event* ev = static_cast<Event*>(e);
  const uint64_t g = ev->recorded.fetch_add(1) + 1;
  static_cast<Stream*>(s)->push([ev, g] {
    uint64_t cur = ev->done.load();
    while (cur < g && !ev->done.compare_exchange_weak(cur, g)) {
    }
  });
  return SUCCESS;
}

API CUresult cuEventQuery(void* e) {
  Event* ev = static_cast<Event*>(e);
  return ev->done.load() >= ev->recorded.load() ? SUCCESS : NOT_READY;
}

API CUresult cuStreamWaitEvent(void* s, void* e, unsigned flags) {
  if (!have_context()) return INVALID_CONTEXT;
  if (!s || !e || flags != 0) return INVALID_HANDLE;
  Event* ev = static_cast<Event*>(e);
  const uint64_t g = ev->recorded.load();
  static_cast<Stream*>(s)->push([ev, g] {
    while (ev->done.load() < g) std::this_thread::sleep_for(std::chrono::microseconds(2));
  });
  return SUCCESS;
}

}  // extern "C"
