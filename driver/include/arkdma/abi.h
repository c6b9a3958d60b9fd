/* Generated from driver/abi.py by `arkdma abi generate`. Do not edit by hand. */
#ifndef ARKDMA_ABI_H
#define ARKDMA_ABI_H

#if defined(__CUDACC_RTC__)
typedef unsigned char uint8_t;
typedef unsigned short uint16_t;
typedef unsigned int uint32_t;
typedef unsigned long long uint64_t;
#else
#include <stddef.h>
#include <stdint.h>
#endif

#define ARKDMA_ABI_VERSION_MAJOR 1u
#define ARKDMA_ABI_VERSION_MINOR 0u
#define ARKDMA_DEVICE_MAGIC 0x41524b44u  /* 'ARKD' */
#define ARKDMA_DESCRIPTOR_BYTES 32u
#define ARKDMA_COMPLETION_BYTES 8u
#define ARKDMA_COMPLETION_ERROR_BIT 63u
#define ARKDMA_COMPLETION_ERROR 0x8000000000000000ULL  /* sticky error flag */
#define ARKDMA_COMPLETION_COUNT_MASK 0x7fffffffffffffffULL
#define ARKDMA_DOORBELL_BITS 32u
#define ARKDMA_IMM_BYTES 8u
#define ARKDMA_MAX_LENGTH 0xffffffffu
#define ARKDMA_WINDOW_BASE 0x10000u

/* descriptor flags */
#define ARKDMA_FLAG_NOTIFY 0x1u
#define ARKDMA_FLAG_FENCE 0x2u
#define ARKDMA_FLAG_IMM 0x4u
#define ARKDMA_FLAGS_VALID 0x7u

/* region permissions */
#define ARKDMA_PERM_READ 0x1u
#define ARKDMA_PERM_WRITE 0x2u

/* capability bits (CAPS register) */
#define ARKDMA_CAP_NOTIFY 0x1u
#define ARKDMA_CAP_FENCE 0x2u
#define ARKDMA_CAP_IMM 0x4u
#define ARKDMA_CAP_ERROR_LOG 0x8u
#define ARKDMA_CAP_BUS_ERRORS 0x10u
#define ARKDMA_CAP_PERF_COUNTERS 0x20u

/* error codes, in the order engines check them */
#define ARKDMA_ERR_NONE 0u  /* no error */
#define ARKDMA_ERR_INVALID_DESCRIPTOR 1u  /* a flag bit outside NOTIFY|FENCE|IMM, or reserved field not zero */
#define ARKDMA_ERR_BAD_LENGTH 2u  /* IMM descriptor whose length is not 8 */
#define ARKDMA_ERR_MISALIGNED 3u  /* IMM descriptor (or completion word) whose destination bus address, region base + offset, is not a multiple of 8 */
#define ARKDMA_ERR_UNKNOWN_REGION 4u  /* region id beyond the table, or region not registered */
#define ARKDMA_ERR_PERMISSION 5u  /* source region lacks READ or destination region lacks WRITE */
#define ARKDMA_ERR_OUT_OF_BOUNDS 6u  /* offset + length beyond the region size, on either side */
#define ARKDMA_ERR_OVERLAP 7u  /* source and destination byte ranges overlap in one region */
#define ARKDMA_ERR_DOORBELL_BACKWARDS 8u  /* doorbell moved backwards (modulo 2**32); write ignored */
#define ARKDMA_ERR_RING_OVERFLOW 9u  /* doorbell more than SLOTS ahead of the completed count */
#define ARKDMA_ERR_BUS_ERROR 10u  /* the memory system refused a read or write of the data */

/* Identity, capabilities, engine control and the error log. */
#define ARKDMA_GLOBAL_BASE 0x0u
#define ARKDMA_GLOBAL_ID 0x0u  /* Access.R: DEVICE_MAGIC, 'ARKD' */
#define ARKDMA_GLOBAL_VERSION 0x4u  /* Access.R: ABI version */
#define ARKDMA_GLOBAL_VERSION_MINOR_LSB 0x0u
#define ARKDMA_GLOBAL_VERSION_MINOR_MASK 0xffffu
#define ARKDMA_GLOBAL_VERSION_MAJOR_LSB 0x10u
#define ARKDMA_GLOBAL_VERSION_MAJOR_MASK 0xffff0000u
#define ARKDMA_GLOBAL_CAPS 0x8u  /* Access.R: Capability bits */
#define ARKDMA_GLOBAL_NUM_QUEUES 0xcu  /* Access.R: queues this engine serves */
#define ARKDMA_GLOBAL_SLOTS 0x10u  /* Access.R: submission window slots per queue (power of two) */
#define ARKDMA_GLOBAL_NUM_REGIONS 0x14u  /* Access.R: entries in the region table */
#define ARKDMA_GLOBAL_DATA_BYTES 0x18u  /* Access.R: datapath width in bytes (0 for software engines) */
#define ARKDMA_GLOBAL_WINDOW_BASE 0x1cu  /* Access.R: BAR offset of queue 0's submission window */
#define ARKDMA_GLOBAL_WINDOW_STRIDE 0x20u  /* Access.R: bytes between two queues' windows */
#define ARKDMA_GLOBAL_CONTROL 0x24u  /* Access.RW: engine control */
#define ARKDMA_GLOBAL_CONTROL_ENABLE_LSB 0x0u
#define ARKDMA_GLOBAL_CONTROL_ENABLE_MASK 0x1u
#define ARKDMA_GLOBAL_CONTROL_RESET_LSB 0x1u
#define ARKDMA_GLOBAL_CONTROL_RESET_MASK 0x2u
#define ARKDMA_GLOBAL_STATUS 0x28u  /* Access.R: engine status; writes change only its RW1C bits */
#define ARKDMA_GLOBAL_STATUS_ENABLED_LSB 0x0u
#define ARKDMA_GLOBAL_STATUS_ENABLED_MASK 0x1u
#define ARKDMA_GLOBAL_STATUS_IDLE_LSB 0x1u
#define ARKDMA_GLOBAL_STATUS_IDLE_MASK 0x2u
#define ARKDMA_GLOBAL_STATUS_HALTED_LSB 0x2u
#define ARKDMA_GLOBAL_STATUS_HALTED_MASK 0x4u
#define ARKDMA_GLOBAL_STATUS_ERRLOG_VALID_LSB 0x3u
#define ARKDMA_GLOBAL_STATUS_ERRLOG_VALID_MASK 0x8u
#define ARKDMA_GLOBAL_STATUS_ERRLOG_OVERFLOW_LSB 0x4u
#define ARKDMA_GLOBAL_STATUS_ERRLOG_OVERFLOW_MASK 0x10u  /* RW1C: an error was dropped because the log was full; stays set until 1 is written here or the engine resets (reading the log leaves it set) */
#define ARKDMA_GLOBAL_ERRLOG_HEAD 0x2cu  /* Access.R: oldest error log entry (valid when STATUS.ERRLOG_VALID) */
#define ARKDMA_GLOBAL_ERRLOG_HEAD_CODE_LSB 0x0u
#define ARKDMA_GLOBAL_ERRLOG_HEAD_CODE_MASK 0xffu
#define ARKDMA_GLOBAL_ERRLOG_HEAD_QUEUE_LSB 0x10u
#define ARKDMA_GLOBAL_ERRLOG_HEAD_QUEUE_MASK 0xffff0000u
#define ARKDMA_GLOBAL_ERRLOG_COOKIE 0x30u  /* Access.R: cookie of the oldest entry's descriptor */
#define ARKDMA_GLOBAL_ERRLOG_INDEX 0x34u  /* Access.R: producer index (low 32 bits) of the oldest entry */
#define ARKDMA_GLOBAL_ERRLOG_POP 0x38u  /* Access.W: write any value: drop the oldest entry (STATUS.ERRLOG_OVERFLOW stays as it is) */
#define ARKDMA_GLOBAL_CYCLES_LO 0x40u  /* Access.R: clock cycles since reset, low word */
#define ARKDMA_GLOBAL_CYCLES_HI 0x44u  /* Access.R: clock cycles since reset, high word */
#define ARKDMA_GLOBAL_DESCRIPTORS_LO 0x48u  /* Access.R: descriptors completed, low word */
#define ARKDMA_GLOBAL_DESCRIPTORS_HI 0x4cu  /* Access.R: descriptors completed, high word */
#define ARKDMA_GLOBAL_BYTES_LO 0x50u  /* Access.R: payload bytes written, low word */
#define ARKDMA_GLOBAL_BYTES_HI 0x54u  /* Access.R: payload bytes written, high word */
#define ARKDMA_GLOBAL_READS_INFLIGHT 0x58u  /* Access.R: read bursts issued and not yet answered */
#define ARKDMA_GLOBAL_STALL_READ 0x5cu  /* Access.R: cycles a read burst waited for the bus */
#define ARKDMA_GLOBAL_STALL_WRITE 0x60u  /* Access.R: cycles a write burst waited for the bus */
#define ARKDMA_GLOBAL_STALL_BUFFER 0x64u  /* Access.R: cycles the read engine waited for buffer space */

/* The region table, one block per region id. Programmed by the host only. */
#define ARKDMA_REGION_BASE 0x1000u
#define ARKDMA_REGION_STRIDE 0x20u
#define ARKDMA_REGION_ADDR_LO 0x0u  /* Access.RW: bus address, low word (shadow until PERMS is written) */
#define ARKDMA_REGION_ADDR_HI 0x4u  /* Access.RW: bus address, high word (shadow) */
#define ARKDMA_REGION_SIZE_LO 0x8u  /* Access.RW: size in bytes, low word (shadow) */
#define ARKDMA_REGION_SIZE_HI 0xcu  /* Access.RW: size in bytes, high word (shadow) */
#define ARKDMA_REGION_PERMS 0x10u  /* Access.RW: writing commits ADDR/SIZE and the permissions at once; 0 unregisters */
#define ARKDMA_REGION_PERMS_READ_LSB 0x0u
#define ARKDMA_REGION_PERMS_READ_MASK 0x1u
#define ARKDMA_REGION_PERMS_WRITE_LSB 0x1u
#define ARKDMA_REGION_PERMS_WRITE_MASK 0x2u

/* One block per queue. The doorbell is the only register the GPU writes. */
#define ARKDMA_QUEUE_BASE 0x2000u
#define ARKDMA_QUEUE_STRIDE 0x40u
#define ARKDMA_QUEUE_CONTROL 0x0u  /* Access.RW: queue control */
#define ARKDMA_QUEUE_CONTROL_ENABLE_LSB 0x0u
#define ARKDMA_QUEUE_CONTROL_ENABLE_MASK 0x1u
#define ARKDMA_QUEUE_STATUS 0x4u  /* Access.R: queue status */
#define ARKDMA_QUEUE_STATUS_ENABLED_LSB 0x0u
#define ARKDMA_QUEUE_STATUS_ENABLED_MASK 0x1u
#define ARKDMA_QUEUE_STATUS_BUSY_LSB 0x1u
#define ARKDMA_QUEUE_STATUS_BUSY_MASK 0x2u
#define ARKDMA_QUEUE_STATUS_HALTED_LSB 0x2u
#define ARKDMA_QUEUE_STATUS_HALTED_MASK 0x4u
#define ARKDMA_QUEUE_STATUS_CODE_LSB 0x8u
#define ARKDMA_QUEUE_STATUS_CODE_MASK 0xff00u
#define ARKDMA_QUEUE_DOORBELL 0x8u  /* Access.RW: producer index, low 32 bits: slots below it are posted */
#define ARKDMA_QUEUE_START_LO 0x10u  /* Access.RW: index of the first descriptor after enable, low word */
#define ARKDMA_QUEUE_START_HI 0x14u  /* Access.RW: index of the first descriptor after enable, high word */
#define ARKDMA_QUEUE_COMPLETED_LO 0x18u  /* Access.R: completion word as the engine holds it, low word */
#define ARKDMA_QUEUE_COMPLETED_HI 0x1cu  /* Access.R: completion word, high word (bit 31 = error) */
#define ARKDMA_QUEUE_COMPL_REGION 0x20u  /* Access.RW: region that receives the completion word */
#define ARKDMA_QUEUE_COMPL_OFFSET_LO 0x24u  /* Access.RW: offset of the completion word in its region, low word (region base + offset must be a multiple of 8) */
#define ARKDMA_QUEUE_COMPL_OFFSET_HI 0x28u  /* Access.RW: offset of the completion word in its region, high word */
#define ARKDMA_QUEUE_ERROR_COOKIE 0x2cu  /* Access.R: cookie of the descriptor that halted the queue */
#define ARKDMA_QUEUE_ERROR_INDEX 0x30u  /* Access.R: producer index (low 32 bits) that halted the queue */

/* what a device-API call returns (device.cuh), and the status record's code */
#define ARKDMA_DEV_OK 0u  /* done */
#define ARKDMA_DEV_PENDING 1u  /* poll(): not completed yet */
#define ARKDMA_DEV_TIMEOUT 2u  /* a wait ran past the handle's budget */
#define ARKDMA_DEV_QUEUE_ERROR 3u  /* the completion word carries the error bit: the queue halted */
#define ARKDMA_DEV_ABORTED 4u  /* the host wrote the status record's abort word */
#define ARKDMA_DEV_BAD_ARGUMENT 5u  /* a null handle, or post_stream sizes out of range (batch 0 or over 64, in flight below batch) */
/* where a device-API failure was met (the status record's site) */
#define ARKDMA_DEV_SITE_POST 1u  /* waiting for room in the window (flow control) */
#define ARKDMA_DEV_SITE_WAIT 2u  /* wait() for a ticket */
#define ARKDMA_DEV_SITE_SIGNAL 3u  /* wait_signal() on a flag */

/* One copy request. Slot i of a queue's submission window holds the descriptor with producer index i (modulo SLOTS). */
typedef struct arkdma_descriptor {
  uint64_t src_offset;  /* +0: byte offset into the source region; for IMM, the value to write */
  uint64_t dst_offset;  /* +8: byte offset into the destination region */
  uint32_t length;  /* +16: bytes to move (0 is a valid no-op); 8 for IMM */
  uint16_t src_region;  /* +20: source region id (ignored for IMM) */
  uint16_t dst_region;  /* +22: destination region id */
  uint16_t flags;  /* +24: NOTIFY | FENCE | IMM; other bits must be zero */
  uint16_t reserved;  /* +26: must be zero */
  uint32_t cookie;  /* +28: caller's tag, reported with an error */
} arkdma_descriptor;

/* The host-visible status record of one queue, in mapped pinned host memory. `code` is written last, after a system fence: once the host reads it non-zero, the other fields are complete. The first failure is recorded; `failures` counts them all. */
typedef struct arkdma_status {
  uint32_t code;  /* +0: ARKDMA_DEV_* of the first failure; 0 while all is well */
  uint32_t site;  /* +4: ARKDMA_DEV_SITE_* */
  uint32_t queue;  /* +8: the queue id */
  uint32_t abort;  /* +12: written by the host: non-zero makes every wait return ABORTED */
  uint64_t expected;  /* +16: the ticket or flag value awaited */
  uint64_t observed;  /* +24: the completion word or flag value last read */
  uint64_t waited_ns;  /* +32: how long the wait had spun */
  uint32_t failures;  /* +40: failures reported on this queue */
  uint32_t reserved;  /* +44: zero */
} arkdma_status;

/* The producer's state of one queue, in GPU memory; persists across kernel launches. */
typedef struct arkdma_producer {
  uint64_t posted;  /* +0: producer index after the last posted descriptor */
  uint64_t completed;  /* +8: the completed count last read (flow control) */
  uint32_t claim;  /* +16: first-failure claim (device-scope atomic) */
  uint32_t reserved;  /* +20: zero */
} arkdma_producer;

/* The device handle of one queue: trivially copyable, passed to kernels by value. */
typedef struct arkdma_queue {
  arkdma_descriptor* window;  /* +0: slot 0 of the submission window */
  uint32_t* doorbell;  /* +8: the queue's doorbell */
  const uint64_t* completion;  /* +16: the completion word the engine writes */
  arkdma_producer* producer;  /* +24: producer state (GPU memory) */
  arkdma_status* status;  /* +32: status record (mapped host memory) */
  uint64_t budget_ns;  /* +40: how long one wait may spin */
  uint32_t slots;  /* +48: window slots, a power of two */
  uint32_t id;  /* +52: queue id (for reports) */
} arkdma_queue;

#if defined(__cplusplus)
#define ARKDMA_STATIC_ASSERT(c, m) static_assert(c, m)
#else
#define ARKDMA_STATIC_ASSERT(c, m) _Static_assert(c, m)
#endif
ARKDMA_STATIC_ASSERT(sizeof(arkdma_descriptor) == 32, "arkdma_descriptor must be 32 bytes");
ARKDMA_STATIC_ASSERT(sizeof(((arkdma_descriptor*)0)->src_offset) == 8, "arkdma_descriptor.src_offset is 8 bytes");
ARKDMA_STATIC_ASSERT(sizeof(((arkdma_descriptor*)0)->dst_offset) == 8, "arkdma_descriptor.dst_offset is 8 bytes");
ARKDMA_STATIC_ASSERT(sizeof(((arkdma_descriptor*)0)->length) == 4, "arkdma_descriptor.length is 4 bytes");
ARKDMA_STATIC_ASSERT(sizeof(((arkdma_descriptor*)0)->src_region) == 2, "arkdma_descriptor.src_region is 2 bytes");
ARKDMA_STATIC_ASSERT(sizeof(((arkdma_descriptor*)0)->dst_region) == 2, "arkdma_descriptor.dst_region is 2 bytes");
ARKDMA_STATIC_ASSERT(sizeof(((arkdma_descriptor*)0)->flags) == 2, "arkdma_descriptor.flags is 2 bytes");
ARKDMA_STATIC_ASSERT(sizeof(((arkdma_descriptor*)0)->reserved) == 2, "arkdma_descriptor.reserved is 2 bytes");
ARKDMA_STATIC_ASSERT(sizeof(((arkdma_descriptor*)0)->cookie) == 4, "arkdma_descriptor.cookie is 4 bytes");
ARKDMA_STATIC_ASSERT(sizeof(arkdma_status) == 48, "arkdma_status must be 48 bytes");
ARKDMA_STATIC_ASSERT(sizeof(((arkdma_status*)0)->code) == 4, "arkdma_status.code is 4 bytes");
ARKDMA_STATIC_ASSERT(sizeof(((arkdma_status*)0)->site) == 4, "arkdma_status.site is 4 bytes");
ARKDMA_STATIC_ASSERT(sizeof(((arkdma_status*)0)->queue) == 4, "arkdma_status.queue is 4 bytes");
ARKDMA_STATIC_ASSERT(sizeof(((arkdma_status*)0)->abort) == 4, "arkdma_status.abort is 4 bytes");
ARKDMA_STATIC_ASSERT(sizeof(((arkdma_status*)0)->expected) == 8, "arkdma_status.expected is 8 bytes");
ARKDMA_STATIC_ASSERT(sizeof(((arkdma_status*)0)->observed) == 8, "arkdma_status.observed is 8 bytes");
ARKDMA_STATIC_ASSERT(sizeof(((arkdma_status*)0)->waited_ns) == 8, "arkdma_status.waited_ns is 8 bytes");
ARKDMA_STATIC_ASSERT(sizeof(((arkdma_status*)0)->failures) == 4, "arkdma_status.failures is 4 bytes");
ARKDMA_STATIC_ASSERT(sizeof(((arkdma_status*)0)->reserved) == 4, "arkdma_status.reserved is 4 bytes");
ARKDMA_STATIC_ASSERT(sizeof(arkdma_producer) == 24, "arkdma_producer must be 24 bytes");
ARKDMA_STATIC_ASSERT(sizeof(((arkdma_producer*)0)->posted) == 8, "arkdma_producer.posted is 8 bytes");
ARKDMA_STATIC_ASSERT(sizeof(((arkdma_producer*)0)->completed) == 8, "arkdma_producer.completed is 8 bytes");
ARKDMA_STATIC_ASSERT(sizeof(((arkdma_producer*)0)->claim) == 4, "arkdma_producer.claim is 4 bytes");
ARKDMA_STATIC_ASSERT(sizeof(((arkdma_producer*)0)->reserved) == 4, "arkdma_producer.reserved is 4 bytes");
ARKDMA_STATIC_ASSERT(sizeof(arkdma_queue) == 56, "arkdma_queue must be 56 bytes");
ARKDMA_STATIC_ASSERT(sizeof(((arkdma_queue*)0)->window) == 8, "arkdma_queue.window is 8 bytes");
ARKDMA_STATIC_ASSERT(sizeof(((arkdma_queue*)0)->doorbell) == 8, "arkdma_queue.doorbell is 8 bytes");
ARKDMA_STATIC_ASSERT(sizeof(((arkdma_queue*)0)->completion) == 8, "arkdma_queue.completion is 8 bytes");
ARKDMA_STATIC_ASSERT(sizeof(((arkdma_queue*)0)->producer) == 8, "arkdma_queue.producer is 8 bytes");
ARKDMA_STATIC_ASSERT(sizeof(((arkdma_queue*)0)->status) == 8, "arkdma_queue.status is 8 bytes");
ARKDMA_STATIC_ASSERT(sizeof(((arkdma_queue*)0)->budget_ns) == 8, "arkdma_queue.budget_ns is 8 bytes");
ARKDMA_STATIC_ASSERT(sizeof(((arkdma_queue*)0)->slots) == 4, "arkdma_queue.slots is 4 bytes");
ARKDMA_STATIC_ASSERT(sizeof(((arkdma_queue*)0)->id) == 4, "arkdma_queue.id is 4 bytes");
#if !defined(__CUDACC_RTC__) /* NVRTC has no offsetof */
ARKDMA_STATIC_ASSERT(offsetof(arkdma_descriptor, src_offset) == 0, "arkdma_descriptor.src_offset at +0");
ARKDMA_STATIC_ASSERT(offsetof(arkdma_descriptor, dst_offset) == 8, "arkdma_descriptor.dst_offset at +8");
ARKDMA_STATIC_ASSERT(offsetof(arkdma_descriptor, length) == 16, "arkdma_descriptor.length at +16");
ARKDMA_STATIC_ASSERT(offsetof(arkdma_descriptor, src_region) == 20, "arkdma_descriptor.src_region at +20");
ARKDMA_STATIC_ASSERT(offsetof(arkdma_descriptor, dst_region) == 22, "arkdma_descriptor.dst_region at +22");
ARKDMA_STATIC_ASSERT(offsetof(arkdma_descriptor, flags) == 24, "arkdma_descriptor.flags at +24");
ARKDMA_STATIC_ASSERT(offsetof(arkdma_descriptor, reserved) == 26, "arkdma_descriptor.reserved at +26");
ARKDMA_STATIC_ASSERT(offsetof(arkdma_descriptor, cookie) == 28, "arkdma_descriptor.cookie at +28");
ARKDMA_STATIC_ASSERT(offsetof(arkdma_status, code) == 0, "arkdma_status.code at +0");
ARKDMA_STATIC_ASSERT(offsetof(arkdma_status, site) == 4, "arkdma_status.site at +4");
ARKDMA_STATIC_ASSERT(offsetof(arkdma_status, queue) == 8, "arkdma_status.queue at +8");
ARKDMA_STATIC_ASSERT(offsetof(arkdma_status, abort) == 12, "arkdma_status.abort at +12");
ARKDMA_STATIC_ASSERT(offsetof(arkdma_status, expected) == 16, "arkdma_status.expected at +16");
ARKDMA_STATIC_ASSERT(offsetof(arkdma_status, observed) == 24, "arkdma_status.observed at +24");
ARKDMA_STATIC_ASSERT(offsetof(arkdma_status, waited_ns) == 32, "arkdma_status.waited_ns at +32");
ARKDMA_STATIC_ASSERT(offsetof(arkdma_status, failures) == 40, "arkdma_status.failures at +40");
ARKDMA_STATIC_ASSERT(offsetof(arkdma_status, reserved) == 44, "arkdma_status.reserved at +44");
ARKDMA_STATIC_ASSERT(offsetof(arkdma_producer, posted) == 0, "arkdma_producer.posted at +0");
ARKDMA_STATIC_ASSERT(offsetof(arkdma_producer, completed) == 8, "arkdma_producer.completed at +8");
ARKDMA_STATIC_ASSERT(offsetof(arkdma_producer, claim) == 16, "arkdma_producer.claim at +16");
ARKDMA_STATIC_ASSERT(offsetof(arkdma_producer, reserved) == 20, "arkdma_producer.reserved at +20");
ARKDMA_STATIC_ASSERT(offsetof(arkdma_queue, window) == 0, "arkdma_queue.window at +0");
ARKDMA_STATIC_ASSERT(offsetof(arkdma_queue, doorbell) == 8, "arkdma_queue.doorbell at +8");
ARKDMA_STATIC_ASSERT(offsetof(arkdma_queue, completion) == 16, "arkdma_queue.completion at +16");
ARKDMA_STATIC_ASSERT(offsetof(arkdma_queue, producer) == 24, "arkdma_queue.producer at +24");
ARKDMA_STATIC_ASSERT(offsetof(arkdma_queue, status) == 32, "arkdma_queue.status at +32");
ARKDMA_STATIC_ASSERT(offsetof(arkdma_queue, budget_ns) == 40, "arkdma_queue.budget_ns at +40");
ARKDMA_STATIC_ASSERT(offsetof(arkdma_queue, slots) == 48, "arkdma_queue.slots at +48");
ARKDMA_STATIC_ASSERT(offsetof(arkdma_queue, id) == 52, "arkdma_queue.id at +52");
#endif

#endif /* ARKDMA_ABI_H */
