/* The arkdma device API: GPU threads post descriptors into an engine's queue and wait for them.
 *
 * Hand-written; the ABI constants, the descriptor and the device API's records come from the
 * generated abi.h. The same code
 * drives the card (window and doorbell in its BAR, mapped for the GPU as I/O memory) and the
 * software engine (window and doorbell in pinned host memory): only the pointers in the handle
 * differ. The host builds the handle (driver/gpu/queue.py) and passes it by value.
 *
 * Rules kept here:
 *   - one producer thread per queue: post()/post_batch()/signal() of a queue are called by one
 *     thread at a time (the producer state in GPU memory is not atomic);
 *   - a publish is: the slots with 16-byte stores, one __threadfence_system(), the doorbell;
 *   - flow control: never more than SLOTS descriptors between the doorbell and the completion word;
 *   - every spin is bounded by the handle's budget (globaltimer ns) and by the host's abort word;
 *     a wait that gives up records why in the queue's host-visible status record and returns a
 *     code instead of hanging.
 */
#ifndef ARKDMA_DEVICE_CUH
#define ARKDMA_DEVICE_CUH

#include "abi.h"

/* The device API's records (arkdma_queue, arkdma_producer, arkdma_status) and its ARKDMA_DEV_* codes
 * are declared in abi.h, generated from driver/abi.py like the descriptor. */

#if defined(__CUDACC__)

namespace arkdma {

constexpr uint64_t COUNT_MASK = ARKDMA_COMPLETION_COUNT_MASK;
constexpr uint64_t ABORT_CHECK_NS = 20000;  // the abort word lives across PCIe: look at it sparingly

__device__ __forceinline__ uint64_t now_ns() {
  uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

__device__ __forceinline__ uint64_t load_acquire(const uint64_t* p) {
  uint64_t v;
  asm volatile("ld.acquire.sys.global.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
  return v;
}

__device__ __forceinline__ uint32_t load_volatile(const uint32_t* p) {
  uint32_t v;
  asm volatile("ld.volatile.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}

__device__ __forceinline__ void store_volatile(uint32_t* p, uint32_t v) {
  asm volatile("st.volatile.global.u32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
}

__device__ __forceinline__ void store_volatile(uint64_t* p, uint64_t v) {
  asm volatile("st.volatile.global.u64 [%0], %1;" ::"l"(p), "l"(v) : "memory");
}

// Counts are 63-bit and may wrap: `a` has reached `b` when a - b, modulo 2**63, is "small".
__device__ __forceinline__ bool reached(uint64_t a, uint64_t b) { return ((a - b) & COUNT_MASK) < (1ull << 62); }

__device__ __forceinline__ uint64_t distance(uint64_t ahead, uint64_t behind) { return (ahead - behind) & COUNT_MASK; }

// One descriptor into one slot as two 16-byte stores (the card sees at most two write bursts).
__device__ __forceinline__ void write_slot(arkdma_descriptor* slot, const arkdma_descriptor& d) {
  const uint64_t* w = reinterpret_cast<const uint64_t*>(&d);
  uint64_t* s = reinterpret_cast<uint64_t*>(slot);
  asm volatile("st.volatile.global.v2.u64 [%0], {%1, %2};" ::"l"(s), "l"(w[0]), "l"(w[1]) : "memory");
  asm volatile("st.volatile.global.v2.u64 [%0], {%1, %2};" ::"l"(s + 2), "l"(w[2]), "l"(w[3]) : "memory");
}

// Records a failure in the queue's status record (the first one wins) and returns `code`.
static __device__ __noinline__ uint32_t report(const arkdma_queue& q, uint32_t code, uint32_t site, uint64_t expected,
                                        uint64_t observed, uint64_t waited_ns) {
  arkdma_status* s = q.status;
  if (s == nullptr) return code;
  const bool first = atomicCAS(&q.producer->claim, 0u, 1u) == 0u;
  if (first) {
    store_volatile(&s->site, site);
    store_volatile(&s->queue, q.id);
    store_volatile(&s->expected, expected);
    store_volatile(&s->observed, observed);
    store_volatile(&s->waited_ns, waited_ns);
  }
  store_volatile(&s->failures, load_volatile(&s->failures) + 1);  // best effort under contention
  if (first) {
    __threadfence_system();
    store_volatile(&s->code, code);
  }
  __threadfence_system();
  return code;
}

// A bounded spin: budget from the handle, abort word checked every ABORT_CHECK_NS.
struct Spin {
  uint64_t start, last_check;
  __device__ __forceinline__ Spin() : start(now_ns()), last_check(start) {}
  // ARKDMA_DEV_OK to keep spinning, else why to stop.
  __device__ __forceinline__ uint32_t check(const arkdma_queue& q, uint64_t* waited) {
    const uint64_t t = now_ns();
    *waited = t - start;
    if (*waited > q.budget_ns) return ARKDMA_DEV_TIMEOUT;
    if (t - last_check > ABORT_CHECK_NS) {
      last_check = t;
      if (q.status != nullptr && load_volatile(&q.status->abort) != 0u) return ARKDMA_DEV_ABORTED;
    }
    return ARKDMA_DEV_OK;
  }
};

// Waits until the completion word reaches `ticket`; `word` gets the last word read.
__device__ __forceinline__ uint32_t spin_completion(const arkdma_queue& q, uint64_t ticket, uint32_t site,
                                                    uint64_t* word) {
  Spin spin;
  uint64_t waited = 0;
  while (true) {
    const uint64_t w = load_acquire(q.completion);
    *word = w;
    if (reached(w & COUNT_MASK, ticket)) return ARKDMA_DEV_OK;
    if (w >> ARKDMA_COMPLETION_ERROR_BIT) return report(q, ARKDMA_DEV_QUEUE_ERROR, site, ticket, w, waited);
    const uint32_t why = spin.check(q, &waited);
    if (why != ARKDMA_DEV_OK) return report(q, why, site, ticket, w, waited);
  }
}

// --- producing ----------------------------------------------------------------------------------

__device__ __forceinline__ arkdma_descriptor copy(uint16_t src_region, uint64_t src_offset, uint16_t dst_region,
                                                  uint64_t dst_offset, uint32_t length, uint16_t flags = 0,
                                                  uint32_t cookie = 0) {
  arkdma_descriptor d;
  d.src_offset = src_offset;
  d.dst_offset = dst_offset;
  d.length = length;
  d.src_region = src_region;
  d.dst_region = dst_region;
  d.flags = flags;
  d.reserved = 0;
  d.cookie = cookie;
  return d;
}

// The remote signal after data: writes `value` (8 bytes) at (dst_region, dst_offset) once every
// earlier descriptor of the queue has landed. NOTIFY so the ticket completes on its own.
__device__ __forceinline__ arkdma_descriptor immediate(uint16_t dst_region, uint64_t dst_offset, uint64_t value,
                                                      uint32_t cookie = 0) {
  return copy(0, value, dst_region, dst_offset, ARKDMA_IMM_BYTES, ARKDMA_FLAG_IMM | ARKDMA_FLAG_NOTIFY, cookie);
}

// Posts `n` descriptors (any n: more than SLOTS go in several publishes, each waiting for room) and
// rings the doorbell once per publish. `*ticket` (when given) gets the completion count at which the
// last one is done. Call from one thread of the producer.
__device__ inline uint32_t post_batch(const arkdma_queue& q, const arkdma_descriptor* d, uint32_t n,
                                            uint64_t* ticket = nullptr) {
  if (q.producer == nullptr || q.window == nullptr || q.doorbell == nullptr || q.slots == 0)
    return ARKDMA_DEV_BAD_ARGUMENT;
  arkdma_producer* p = q.producer;
  uint64_t posted = p->posted, completed = p->completed;
  const uint64_t mask = q.slots - 1;
  uint32_t done = 0;
  uint32_t rc = ARKDMA_DEV_OK;
  while (done < n) {
    if (distance(posted, completed) >= q.slots) {
      // Full: wait for room for as much of the rest as fits.
      const uint32_t want = min(n - done, q.slots);
      uint64_t word = 0;
      rc = spin_completion(q, (posted + want - q.slots) & COUNT_MASK, ARKDMA_DEV_SITE_POST, &word);
      if (rc != ARKDMA_DEV_OK) break;
      completed = word & COUNT_MASK;
    }
    const uint32_t room = q.slots - static_cast<uint32_t>(distance(posted, completed));
    const uint32_t k = min(room, n - done);
    for (uint32_t i = 0; i < k; ++i) write_slot(q.window + ((posted + i) & mask), d[done + i]);
    __threadfence_system();  // the slots before the doorbell, on every path to the engine
    posted = (posted + k) & COUNT_MASK;
    store_volatile(q.doorbell, static_cast<uint32_t>(posted));
    done += k;
  }
  p->posted = posted;
  p->completed = completed;
  if (ticket != nullptr) *ticket = posted;
  return rc;
}

__device__ __forceinline__ uint32_t post(const arkdma_queue& q, const arkdma_descriptor& d, uint64_t* ticket = nullptr) {
  return post_batch(q, &d, 1, ticket);
}

// Posts an IMM descriptor: `value` lands at (dst_region, dst_offset) after everything posted before.
__device__ __forceinline__ uint32_t signal(const arkdma_queue& q, uint16_t dst_region, uint64_t dst_offset,
                                          uint64_t value, uint64_t* ticket = nullptr) {
  const arkdma_descriptor d = immediate(dst_region, dst_offset, value);
  return post_batch(q, &d, 1, ticket);
}

// --- completing ---------------------------------------------------------------------------------

// Waits until every descriptor below `ticket` has completed. A halted queue whose completion count
// already covers the ticket still returns OK: those descriptors did run.
__device__ inline uint32_t wait(const arkdma_queue& q, uint64_t ticket) {
  uint64_t word = 0;
  return spin_completion(q, ticket & COUNT_MASK, ARKDMA_DEV_SITE_WAIT, &word);
}

// One look: OK when `ticket` has completed, PENDING when not yet, QUEUE_ERROR when the queue halted
// before it (not recorded in the status record: the caller decides).
__device__ __forceinline__ uint32_t poll(const arkdma_queue& q, uint64_t ticket) {
  const uint64_t w = load_acquire(q.completion);
  if (reached(w & COUNT_MASK, ticket & COUNT_MASK)) return ARKDMA_DEV_OK;
  return (w >> ARKDMA_COMPLETION_ERROR_BIT) ? ARKDMA_DEV_QUEUE_ERROR : ARKDMA_DEV_PENDING;
}

// The completion word as last written by the engine (count | error bit).
__device__ __forceinline__ uint64_t completion_word(const arkdma_queue& q) { return load_acquire(q.completion); }

// Waits on a local flag (GPU memory another engine's IMM descriptor writes) until it reaches
// `value`; failures are recorded in `q`'s status record.
__device__ inline uint32_t wait_signal(const arkdma_queue& q, const uint64_t* flag, uint64_t value) {
  Spin spin;
  uint64_t waited = 0;
  while (true) {
    const uint64_t v = load_acquire(flag);
    if (v >= value) return ARKDMA_DEV_OK;
    const uint32_t why = spin.check(q, &waited);
    if (why != ARKDMA_DEV_OK) return report(q, why, ARKDMA_DEV_SITE_SIGNAL, value, v, waited);
  }
}

// --- streaming ---------------------------------------------------------------------------------

// Streams `count` descriptors through the queue, `make(k)` giving the k-th (k = 0 .. count-1): `batch` of
// them per publish (1..STREAM_BATCH: they are built on the stack), never more than `inflight` (at least
// `batch`) posted and not yet completed, and the last of each publish marked NOTIFY so the completion
// word keeps up. Does not wait for the last publish: `*ticket` gets the completion count at which every
// descriptor posted is done, `*sent` how many were posted (fewer than `count` after a failure, whose
// code is returned). Bad sizes return BAD_ARGUMENT before anything is posted.
constexpr uint32_t STREAM_BATCH = 64;

template <typename Make>
__device__ inline uint32_t post_stream(const arkdma_queue& q, uint32_t count, uint32_t batch, uint32_t inflight,
                                       Make make, uint64_t* ticket = nullptr, uint32_t* sent = nullptr) {
  if (sent != nullptr) *sent = 0;
  if (q.producer == nullptr || batch == 0 || batch > STREAM_BATCH || inflight < batch) return ARKDMA_DEV_BAD_ARGUMENT;
  arkdma_descriptor d[STREAM_BATCH];
  const uint64_t start = q.producer->posted;
  uint64_t last = start;
  uint32_t rc = ARKDMA_DEV_OK, next = 0;
  while (next < count) {
    const uint32_t n = min(batch, count - next);
    if (next + n > inflight) {  // room for this publish within `inflight`
      rc = wait(q, start + next + n - inflight);
      if (rc != ARKDMA_DEV_OK) break;
    }
    for (uint32_t i = 0; i < n; ++i) d[i] = make(next + i);
    d[n - 1].flags |= ARKDMA_FLAG_NOTIFY;
    rc = post_batch(q, d, n, &last);
    if (rc != ARKDMA_DEV_OK) break;
    next += n;
  }
  if (ticket != nullptr) *ticket = last;
  if (sent != nullptr) *sent = static_cast<uint32_t>(distance(last, start));  // a failed publish may post part
  return rc;
}

}  // namespace arkdma

#endif /* __CUDACC__ */

#endif /* ARKDMA_DEVICE_CUH */
