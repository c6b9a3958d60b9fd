// The C API of arkdma_engine.h, which host/native.py loads with ctypes: plain types, status codes, and a
// per-thread message for the last failure (arkdma_sw_last_error).
#include <cstring>
#include <string>
#include <vector>

#include "arkdma_engine.h"
#include "cuda_driver.h"
#include "engine.h"

using arkdma::Engine;

namespace {

thread_local std::string g_last_error;

int fail(int status, const std::string& message) {
  g_last_error = message;
  return status;
}

int done(int status, const std::string& message) {
  if (status != arkdma::OK) g_last_error = message;
  return status;
}

}  // namespace

extern "C" {

#define ARKDMA_API __attribute__((visibility("default")))

ARKDMA_API const char* arkdma_sw_last_error(void) { return g_last_error.c_str(); }

ARKDMA_API int arkdma_sw_abi_version(void) { return ARKDMA_ABI_VERSION_MAJOR << 16 | ARKDMA_ABI_VERSION_MINOR; }

ARKDMA_API int arkdma_sw_create(const arkdma_sw_config* c, int executor, Engine** out) {
  if (c == nullptr || out == nullptr) return fail(arkdma::BAD_ARGUMENT, "null config or output pointer");
  if (executor != 0 && executor != 1) {
    return fail(arkdma::BAD_ARGUMENT, "executor must be 0 (host) or 1 (cuda), not " + std::to_string(executor));
  }
  arkdma::Config config;
  config.num_queues = c->num_queues;
  config.slots = c->slots;
  config.num_regions = c->num_regions;
  config.errlog_depth = c->errlog_depth;
  config.streams_per_queue = c->streams_per_queue;
  config.batch_copies = c->batch_copies != 0;
  config.merge = c->merge != 0;
  config.stop_check_every = c->stop_check_every;
  config.spin_before_sleep = c->spin_before_sleep;
  config.sleep_us = c->sleep_us;
  config.device = c->device;
  if (c->ncpus && c->cpus == nullptr) return fail(arkdma::BAD_ARGUMENT, "ncpus given without a cpus array");
  config.cpus.assign(c->cpus, c->cpus + c->ncpus);
  std::string error;
  auto kind = executor ? arkdma::ExecutorKind::CUDA : arkdma::ExecutorKind::HOST;
  auto engine = Engine::create(config, kind, error);
  if (!engine) return fail(executor ? arkdma::UNAVAILABLE : arkdma::BAD_ARGUMENT, error);
  *out = engine.release();
  return arkdma::OK;
}

ARKDMA_API void arkdma_sw_destroy(Engine* e) { delete e; }

ARKDMA_API int arkdma_sw_start(Engine* e) {
  std::string error;
  int rc = e->start(error);
  return done(rc, error);
}

ARKDMA_API int arkdma_sw_stop(Engine* e, double timeout) {
  std::string error;
  int rc = e->stop(timeout, error);
  return done(rc, error);
}

ARKDMA_API int arkdma_sw_running(Engine* e) { return e->running() ? 1 : 0; }

ARKDMA_API int arkdma_sw_set_region(Engine* e, uint32_t region, uint64_t addr, uint64_t size, uint32_t perms,
                                    double timeout) {
  std::string error;
  int rc = e->set_region(region, addr, size, perms, timeout, error);
  return done(rc, error);
}

ARKDMA_API int arkdma_sw_configure_queue(Engine* e, uint32_t q, uint32_t region, uint64_t offset, uint64_t start,
                                         double timeout) {
  std::string error;
  int rc = e->configure_queue(q, region, offset, start, timeout, error);
  return done(rc, error);
}

ARKDMA_API int arkdma_sw_enable_queue(Engine* e, uint32_t q, double timeout) {
  std::string error;
  int rc = e->enable_queue(q, timeout, error);
  return done(rc, error);
}

ARKDMA_API int arkdma_sw_disable_queue(Engine* e, uint32_t q, double timeout) {
  std::string error;
  int rc = e->disable_queue(q, timeout, error);
  return done(rc, error);
}

ARKDMA_API int arkdma_sw_reset(Engine* e, double timeout) {
  std::string error;
  int rc = e->reset(timeout, error);
  return done(rc, error);
}

ARKDMA_API int arkdma_sw_ring(Engine* e, uint32_t q, uint32_t value, double timeout) {
  std::string error;
  int rc = e->ring(q, value, timeout, error);
  return done(rc, error);
}

ARKDMA_API int arkdma_sw_queue_pointers(Engine* e, uint32_t q, uint64_t* out) {
  std::string error;
  int rc = e->queue_pointers(q, out, error);
  return done(rc, error);
}

ARKDMA_API int arkdma_sw_queue_state(Engine* e, uint32_t q, arkdma_sw_queue_info* out, double timeout) {
  std::string error;
  arkdma::QueueStateOut s{};
  int rc = e->queue_state(q, s, timeout, error);
  if (rc == arkdma::OK) {
    *out = arkdma_sw_queue_info{s.enabled, s.halted, s.busy, s.error, s.error_cookie, s.error_index,
                                 s.completion_word};
  }
  return done(rc, error);
}

// Pops up to `max` entries, oldest first; the rest stay for the next call.
ARKDMA_API int arkdma_sw_error_log(Engine* e, arkdma_sw_errlog_entry* out, uint32_t max, uint32_t* count,
                                   double timeout) {
  std::string error;
  std::vector<arkdma::ErrorLogEntry> entries;
  int rc = e->pop_error_log(entries, max, timeout, error);
  if (rc != arkdma::OK) return done(rc, error);
  for (size_t i = 0; i < entries.size(); ++i) {
    out[i] = arkdma_sw_errlog_entry{entries[i].queue, entries[i].code, entries[i].cookie, entries[i].index};
  }
  *count = static_cast<uint32_t>(entries.size());
  return arkdma::OK;
}

// STATUS.ERRLOG_OVERFLOW.
ARKDMA_API int arkdma_sw_errlog_overflow(Engine* e, uint32_t* overflow, double timeout) {
  std::string error;
  bool over = false;
  int rc = e->errlog_overflow(over, timeout, error);
  *overflow = over ? 1 : 0;
  return done(rc, error);
}

// Writes 1 to STATUS.ERRLOG_OVERFLOW: clears it, the log keeps its entries.
ARKDMA_API int arkdma_sw_clear_errlog_overflow(Engine* e, double timeout) {
  std::string error;
  return done(e->clear_errlog_overflow(timeout, error), error);
}

ARKDMA_API int arkdma_sw_counters(Engine* e, uint64_t* descriptors, uint64_t* bytes, double timeout) {
  std::string error;
  int rc = e->counters(*descriptors, *bytes, timeout, error);
  return done(rc, error);
}

ARKDMA_API int arkdma_sw_busy(Engine* e, int* busy, double timeout) {
  std::string error;
  bool b = false;
  int rc = e->busy(b, timeout, error);
  *busy = b ? 1 : 0;
  return done(rc, error);
}

ARKDMA_API int arkdma_sw_stats(Engine* e, uint64_t* out, int n) {
  e->stats(out, n);
  return arkdma::STAT_COUNT;
}

// The last error an executor noted (a CUDA call that failed, say), then cleared.
ARKDMA_API int arkdma_sw_take_note(Engine* e, char* out, uint32_t len) {
  std::string note = e->take_note();
  if (len) {
    std::strncpy(out, note.c_str(), len - 1);
    out[len - 1] = '\0';
  }
  return arkdma::OK;
}

// --- memory the engine can reach (placement 0: host, 1: GPU) ----------------------------------

ARKDMA_API int arkdma_sw_mem_alloc(Engine* e, uint64_t size, int placement, uint64_t* host, uint64_t* bus) {
  auto& ex = e->executor();
  if (!ex.bind_thread()) return fail(arkdma::DRIVER_FAILURE, e->take_note());
  arkdma::PinnedMemory m;
  if (!ex.alloc(size, placement ? arkdma::Placement::DEVICE : arkdma::Placement::HOST, m)) {
    return fail(arkdma::DRIVER_FAILURE, "could not allocate " + std::to_string(size) + " bytes: " + e->take_note());
  }
  *host = reinterpret_cast<uint64_t>(m.host);
  *bus = m.host && !m.device ? reinterpret_cast<uint64_t>(m.host) : m.device;
  return arkdma::OK;
}

ARKDMA_API int arkdma_sw_mem_free(Engine* e, uint64_t host, uint64_t bus, int placement) {
  auto& ex = e->executor();
  if (!ex.bind_thread()) return fail(arkdma::DRIVER_FAILURE, e->take_note());
  arkdma::PinnedMemory m{reinterpret_cast<uint8_t*>(host), bus, 0};
  ex.free(m, placement ? arkdma::Placement::DEVICE : arkdma::Placement::HOST);
  return arkdma::OK;
}

// Synchronous copies between GPU memory and the caller (host memory is read through its pointer).
ARKDMA_API int arkdma_sw_mem_read(Engine* e, uint64_t bus, void* dst, uint64_t n) {
  auto& ex = e->executor();
  if (!ex.bind_thread() || !ex.read_device(bus, dst, n)) {
    return fail(arkdma::DRIVER_FAILURE, e->take_note());
  }
  return arkdma::OK;
}

ARKDMA_API int arkdma_sw_mem_write(Engine* e, uint64_t bus, const void* src, uint64_t n) {
  auto& ex = e->executor();
  if (!ex.bind_thread() || !ex.write_device(bus, src, n)) {
    return fail(arkdma::DRIVER_FAILURE, e->take_note());
  }
  return arkdma::OK;
}

// --- probing CUDA without an engine --------------------------------------------------------------

// Fills the device's name and PCI bus id; returns UNAVAILABLE with the reason when CUDA cannot run.
ARKDMA_API int arkdma_sw_cuda_probe(int32_t device, int32_t* count, char* name, uint32_t name_len, char* bus_id,
                                    uint32_t bus_len) {
  using namespace arkdma::cuda;
  std::string error;
  const Driver* cu = load_driver(error);
  if (cu == nullptr) return fail(arkdma::UNAVAILABLE, error);
  int n = 0;
  CUresult rc = cu->cuDeviceGetCount(&n);
  if (rc != CUDA_SUCCESS) return fail(arkdma::UNAVAILABLE, cu->describe("cuDeviceGetCount", rc));
  *count = n;
  if (n == 0) return fail(arkdma::UNAVAILABLE, "no CUDA GPU found; use engine software-host");
  if (device < 0 || device >= n) {
    return fail(arkdma::BAD_ARGUMENT, "CUDA device " + std::to_string(device) + " does not exist (0.." +
                                          std::to_string(n - 1) + ")");
  }
  CUdevice d = 0;
  if ((rc = cu->cuDeviceGet(&d, device)) != CUDA_SUCCESS) return fail(arkdma::UNAVAILABLE, cu->describe("cuDeviceGet", rc));
  if ((rc = cu->cuDeviceGetName(name, static_cast<int>(name_len), d)) != CUDA_SUCCESS) {
    return fail(arkdma::UNAVAILABLE, cu->describe("cuDeviceGetName", rc));
  }
  if ((rc = cu->cuDeviceGetPCIBusId(bus_id, static_cast<int>(bus_len), d)) != CUDA_SUCCESS) {
    return fail(arkdma::UNAVAILABLE, cu->describe("cuDeviceGetPCIBusId", rc));
  }
  return arkdma::OK;
}

}  // extern "C"
