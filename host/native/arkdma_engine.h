/* The software engine's C API, loaded by host/native.py with ctypes. Every function returns a status
 * (0 = OK, else the code of host/native/engine.h's Status) and leaves a message for
 * arkdma_sw_last_error(); timeouts are seconds. tests/host/test_native_header.py checks the ctypes
 * binding against this header: function names, parameter names and C types, struct fields. */
#ifndef ARKDMA_ENGINE_H
#define ARKDMA_ENGINE_H

#include <stdint.h>

#ifdef __cplusplus
namespace arkdma {
class Engine;
}
typedef arkdma::Engine arkdma_sw_engine;
extern "C" {
#else
typedef struct arkdma_sw_engine arkdma_sw_engine;
#endif

typedef struct arkdma_sw_config {
  uint32_t num_queues;
  uint32_t slots;
  uint32_t num_regions;
  uint32_t errlog_depth;
  uint32_t streams_per_queue;
  uint32_t batch_copies;
  uint32_t merge;
  uint32_t stop_check_every;
  int64_t spin_before_sleep;
  uint32_t sleep_us;
  int32_t device;
  uint32_t ncpus;
  const int32_t* cpus;
} arkdma_sw_config;

typedef struct arkdma_sw_queue_info {
  uint32_t enabled;
  uint32_t halted;
  uint32_t busy;
  uint32_t error;
  uint32_t error_cookie;
  uint32_t error_index;
  uint64_t completion_word;
} arkdma_sw_queue_info;

typedef struct arkdma_sw_errlog_entry {
  uint32_t queue;
  uint32_t code;
  uint32_t cookie;
  uint32_t index;
} arkdma_sw_errlog_entry;

const char* arkdma_sw_last_error(void);
int arkdma_sw_abi_version(void);
int arkdma_sw_create(const arkdma_sw_config* config, int executor, arkdma_sw_engine** engine_out);
void arkdma_sw_destroy(arkdma_sw_engine* engine);
int arkdma_sw_start(arkdma_sw_engine* engine);
int arkdma_sw_stop(arkdma_sw_engine* engine, double timeout);
int arkdma_sw_running(arkdma_sw_engine* engine);
int arkdma_sw_set_region(arkdma_sw_engine* engine, uint32_t region, uint64_t addr, uint64_t size, uint32_t perms,
                         double timeout);
int arkdma_sw_configure_queue(arkdma_sw_engine* engine, uint32_t queue, uint32_t completion_region,
                              uint64_t completion_offset, uint64_t start, double timeout);
int arkdma_sw_enable_queue(arkdma_sw_engine* engine, uint32_t queue, double timeout);
int arkdma_sw_disable_queue(arkdma_sw_engine* engine, uint32_t queue, double timeout);
int arkdma_sw_reset(arkdma_sw_engine* engine, double timeout);
int arkdma_sw_ring(arkdma_sw_engine* engine, uint32_t queue, uint32_t doorbell, double timeout);
/* out: window (host), window (device), doorbell (host), doorbell (device); device addresses 0 when no GPU maps them */
int arkdma_sw_queue_pointers(arkdma_sw_engine* engine, uint32_t queue, uint64_t* out);
int arkdma_sw_queue_state(arkdma_sw_engine* engine, uint32_t queue, arkdma_sw_queue_info* out, double timeout);
/* pops up to `capacity` entries, oldest first; the rest stay for the next call */
int arkdma_sw_error_log(arkdma_sw_engine* engine, arkdma_sw_errlog_entry* entries, uint32_t capacity,
                        uint32_t* count_out, double timeout);
/* STATUS.ERRLOG_OVERFLOW: set when an entry was dropped, cleared only by the next call (write 1) or a reset */
int arkdma_sw_errlog_overflow(arkdma_sw_engine* engine, uint32_t* overflow_out, double timeout);
int arkdma_sw_clear_errlog_overflow(arkdma_sw_engine* engine, double timeout);
int arkdma_sw_counters(arkdma_sw_engine* engine, uint64_t* descriptors_out, uint64_t* bytes_out, double timeout);
int arkdma_sw_busy(arkdma_sw_engine* engine, int* busy_out, double timeout);
int arkdma_sw_stats(arkdma_sw_engine* engine, uint64_t* out, int count);
int arkdma_sw_take_note(arkdma_sw_engine* engine, char* text, uint32_t capacity);
int arkdma_sw_mem_alloc(arkdma_sw_engine* engine, uint64_t size, int placement, uint64_t* host_out, uint64_t* bus_out);
int arkdma_sw_mem_free(arkdma_sw_engine* engine, uint64_t host, uint64_t bus, int placement);
int arkdma_sw_mem_read(arkdma_sw_engine* engine, uint64_t bus, void* dst, uint64_t size);
int arkdma_sw_mem_write(arkdma_sw_engine* engine, uint64_t bus, const void* src, uint64_t size);
int arkdma_sw_cuda_probe(int32_t device, int32_t* count_out, char* name, uint32_t name_capacity, char* pci_bus_id,
                         uint32_t pci_capacity);

#ifdef __cplusplus
}
#endif
#endif /* ARKDMA_ENGINE_H */
