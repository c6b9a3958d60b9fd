/* The loop kernel's machinery: the control block the host drives through mapped memory, the per-SM
 * instruction streams, the counters that order tiles across SMs, and faults.
 *
 * Launched once, one CTA per SM (a cooperative launch: all CTAs resident). Iteration i runs when the host
 * has raised `go` above i; each CTA plays its stream (wait / run / signal), then stamps and counts its arrival; the
 * last CTA to finish an iteration the host must hear of (the last one asked for, and every PUBLISH_EVERY-th: every
 * 16th unless ARK_PUBLISH_EVERY says otherwise) publishes it (`done = i + 1`: arrive()). CTAs are not held in step:
 * one may run up to RING iterations ahead of the last iteration published, because iteration i's arrivals are
 * counted in slot i % RING (the bound keeps two iterations from sharing a slot). A counter only grows: a tile's
 * counter reads i + 1 once the tile ran in iteration i, so a wait is "counter >= i + delta" and nothing is ever
 * reset.
 *
 * Host memory is read by one thread at a time, not polled by every CTA (132 pollers flood PCIe and slow every
 * transfer to the host): CTA 0 forwards the host's go and stop into GPU words (`finished[RING + 1]`,
 * `[RING + 2]`) whenever it waits for go, and reads the host's stop between iterations at most every
 * STOP_POLL_NS of the GPU clock while it runs; every CTA reads the forwarded stop between iterations as often. A
 * thread stuck in a wait also reads the host's stop itself, now and then, so a stop reaches every CTA whatever
 * CTA 0 is doing. The host's go may be written by the host or by a stream memory operation on the GPU (the
 * runtime's go stream, ordered after the caller's queued work); either way it lands in the same mapped word.
 *
 * Every wait is bounded (budget_ns of globaltimer) and watches the stop word and the fault word: a
 * wait that gives up, a tile that finds bad input, or a DMA that fails records a fault (the first one wins),
 * and every CTA leaves the kernel; the host turns the record into an exception naming the tile and op.
 *
 * With device-graph copies (ARK_GRAPH_COPIES) the kernel runs inside a graph, and one run of a graph may launch
 * only so many graphs (fire-and-forget): after `segment_iterations` iterations every CTA leaves, and CTA 0 first
 * queues the kernel's own graph again as a tail launch (it starts once this grid and its copies are done), with
 * the iteration to go on from in `finished[SEGMENT_AT]`. Nothing else carries over: counters and slots are in
 * memory, and go and the ring are read again.
 */
#ifndef ARK_LOOP_CUH
#define ARK_LOOP_CUH

#include <arkdma/device.cuh>

#include "codes.h"  // Ins, FaultCode, RING and the graph copies' words (generated)

namespace ark {


/* In pinned host memory, mapped for the GPU: written by the host (go, stop) and by the kernel (the rest). */
struct Control {
  unsigned long long go;    // iterations the host has asked for, in all
  unsigned long long stop;  // non-zero: leave the kernel
  unsigned long long done;  // iterations every CTA has finished
  unsigned int fault;       // FaultCode of the first fault
  unsigned int fault_sm;
  int fault_tile;           // the tile that faulted or waited, -1 when none
  int fault_counter;        // the counter waited on, -1 when none
  unsigned long long fault_expected, fault_observed, fault_detail;
};

/* In GPU memory, built by the host from the plan (ark_runtime/kernel/program.py). */
struct Program {
  const int4* ins;            // per instruction, two int4 (program.py): run (kind, tile, op, r0 | r1, c0, c1, case),
                              // signal (kind, counter, -, tile | -), wait (kind, counter, delta, tile | first member,
                              // member count, -, -)
  const int* stream_start;    // per SM: first instruction; [num_sms] is the end
  const int* members;         // the tile counters of every op group
  unsigned long long* counters;
  unsigned long long* finished;  // [RING] CTAs that finished iteration i, in slot i % RING; [RING] iterations
                                 // published; [RING + 1] go and [RING + 2] stop as CTA 0 last read them from the host
  unsigned long long* done_ns;   // [RING][CTAs] when each CTA finished iteration i (globaltimer), in row i % RING
  unsigned int* fault_flag;   // non-zero once any CTA faulted (GPU memory: cheap to watch)
  void* const* tensors;       // per tensor id: its address; then, from word gen::TENSOR_MAPS_AT (64-byte aligned),
                              // the tensor maps of TMA loads, 128 bytes each (codegen.tensor_maps_at)
  unsigned long long* tile_ns; // per tile: start and end of its last run (globaltimer), for Runtime.profile()
  const int4* copies;         // per op: path (0 SM stores, 1 the engine's queue: source region, destination region;
                              // 2 a device graph: its graph copy's index)
  const unsigned long long* graphs;  // per graph copy, GRAPH_POOL executable graphs (copy.cuh)
  unsigned long long* graph_words;   // per graph copy, GRAPH_WORDS words (copy.cuh)
  unsigned long long budget_ns;
  unsigned long long segment_iterations;  // graph copies: iterations per run of the kernel's graph
  Control* control;
};

/* Instructions a CTA holds in shared memory at a time (two int4 each): reading the stream from global memory
 * after every wait would cost a round trip to L2 per instruction, since a wait's acquire load empties L1. */
constexpr int CHUNK = 64;

__device__ __forceinline__ unsigned long long load_acquire_gpu(const unsigned long long* p) {
  unsigned long long v;
  asm volatile("ld.acquire.gpu.global.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
  return v;
}

/* A counter as a wait reads it: in a World's kernel at system scope, since the tile it waits for may have run on
 * another GPU (its writes, to this GPU's memory or its own, are visible after). */
__device__ __forceinline__ unsigned long long load_counter(const unsigned long long* p) {
#if ARK_WORLD
  unsigned long long v;
  asm volatile("ld.acquire.sys.global.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
  return v;
#else
  return load_acquire_gpu(p);
#endif
}

__device__ __forceinline__ unsigned long long load_host(const unsigned long long* p) {
  unsigned long long v;
  asm volatile("ld.volatile.global.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
  return v;
}

/* The first fault wins; every later one only raises the flag. Called by one thread. */
__device__ __noinline__ void fault(const Program& p, unsigned code, int tile, int counter, unsigned long long expected,
                                   unsigned long long observed, unsigned long long detail) {
  if (atomicCAS(p.fault_flag, 0u, code) == 0u) {
    Control* c = p.control;
    c->fault_sm = blockIdx.x;
    c->fault_tile = tile;
    c->fault_counter = counter;
    c->fault_expected = expected;
    c->fault_observed = observed;
    c->fault_detail = detail;
    __threadfence_system();
    *(volatile unsigned*)&c->fault = code;
  }
  __threadfence_system();
}

constexpr int GO_SEEN = RING + 1, STOP_SEEN = RING + 2, SEGMENT_AT = RING + 3;
static_assert(FINISHED_WORDS == RING + 4, "codes.py: the ring's slots, then published, go, stop and the segment");

/* The host's stop word, read across PCIe and passed on to the GPU copy every CTA watches. */
__device__ __forceinline__ bool host_stop(const Program& p) {
  if (load_host(&p.control->stop) == 0ull) return false;
  *(volatile unsigned long long*)(p.finished + STOP_SEEN) = 1ull;
  return true;
}

/* The host's go, forwarded (CTA 0 only). */
__device__ __forceinline__ unsigned long long forward_go(const Program& p) {
  const unsigned long long go = load_host(&p.control->go);
  atomicMax(p.finished + GO_SEEN, go);
  return go;
}

__device__ __forceinline__ bool stopping(const Program& p) {
  return *(volatile unsigned*)p.fault_flag != 0u || *(volatile unsigned long long*)(p.finished + STOP_SEEN) != 0ull;
}

/* Between iterations a CTA looks for a stop at most this often (GPU clock): with iterations queued and no wait
 * between SMs a CTA never waits for go, so without this look it would run every queued iteration before leaving.
 * The look is one or two loads (CTA 0: a read across PCIe too), due once this long has passed since the last. */
constexpr unsigned long long STOP_POLL_NS = 100000;

/* Thread 0, at the start of an iteration it may begin at once (`now`: its last arrival's stamp, the GPU clock):
 * whether the kernel is being stopped, looked at no more than every STOP_POLL_NS (`next`: when the next look is
 * due). CTA 0 reads the host's stop (and forwards it); the others read the forwarded word and the fault flag. */
__device__ __forceinline__ bool stop_between(const Program& p, unsigned long long now, unsigned long long& next) {
  if (now < next) return false;
  next = now + STOP_POLL_NS;
  return stopping(p) || (blockIdx.x == 0 && host_stop(p));
}

/* One lane spins until counter word `word` reaches `target`; false when it gave up (fault recorded, naming
 * the counter waited on) or was stopped. Acquire loads: what the signalling tile wrote is visible after. */
__device__ __forceinline__ bool spin_until(const Program& p, int word, unsigned long long target, int tile, int counter,
                           unsigned long long t0) {
  unsigned spins = 0;
  while (true) {
    const unsigned long long v = load_counter(p.counters + word);
    if (v >= target) return true;
    if ((++spins & 63u) == 0u) {
      if (stopping(p) || ((spins & 8191u) == 0u && host_stop(p))) return false;
      const unsigned long long waited = arkdma::now_ns() - t0;
      if (waited > p.budget_ns) {
        fault(p, FAULT_TIMEOUT, tile, counter, target, v, waited);
        return false;
      }
    }
  }
}

/* Every thread of the CTA: the `count` consecutive waits at `w` (two int4 each) of iteration `it`, all at once. A
 * wait on a tile's counter is one word; a wait on an op's group is every member's word (the group's value is their
 * least). The words of all the waits are dealt out to the CTA's threads, one each up to blockDim.x words, so the
 * waits cost one read of the member list and one acquire load, in parallel, however many tiles they cover (warp 0
 * alone took a round trip to L2 per 32 words, and each word's member id is another). True on this thread when its
 * words were met; the caller ORs the failures over the CTA. */
__device__ __forceinline__ bool wait_all(const Program& p, const int4* w, int count, unsigned long long it) {
  const int t = threadIdx.x, nt = blockDim.x;
  const unsigned long long t0 = arkdma::now_ns();
  bool ok = true;
  int first = 0;  // the flattened index of wait k's first word
  for (int k = 0; k < count && ok; ++k) {
    const int4 in = w[2 * k], g = w[2 * k + 1];
    const int n = g.y == 0 ? 1 : g.y;
    const unsigned long long target = it + (unsigned long long)in.z;
    for (int m = ((t - first) % nt + nt) % nt; m < n && ok; m += nt)
      ok = spin_until(p, g.y == 0 ? in.y : p.members[g.x + m], target, in.w, in.y, t0);
    first += n;
  }
  return ok;
}

/* Thread 0, after the CTA's barrier that ends the tile: a release reduction, which makes every thread's writes to
 * the tile (ordered before it by the barrier) visible to whoever acquires the counter. On the H200 this took
 * block-s128 from 65.2 to 58.4 us against __threadfence() + atomicAdd, and cost one lone cross-SM edge 0.11 us
 * (tasks1000: 1.76 against 1.64 us per edge; bench/results/h200/experiments/signal_*.json). */
__device__ __forceinline__ void signal_counter(const Program& p, int counter) {
  asm volatile("red.release.gpu.global.add.u64 [%0], 1;" ::"l"(p.counters + counter) : "memory");
}

/* Iterations between the host's sightings of `done` while a run goes on (the last iteration it asked for is always
 * published at once). 16 by default: publishing every iteration (ARK_PUBLISH_EVERY=1, which the runtime passes
 * from the environment variable of that name) made every arrival an acq_rel read-back, and chain64 5.34 us an
 * iteration against 4.22 on an H200 (bench/results/h200/runtime_structure/). */
#ifndef ARK_PUBLISH_EVERY
#define ARK_PUBLISH_EVERY 16
#endif
constexpr unsigned long long PUBLISH_EVERY = ARK_PUBLISH_EVERY;
static_assert(PUBLISH_EVERY >= 1 && PUBLISH_EVERY < RING, "ARK_PUBLISH_EVERY: 1 to RING - 1 (the ring's pace moves "
              "at published iterations only)");

/* Thread 0, after the barrier that ends iteration `it` on this CTA (`go`: the host's go as this thread last read
 * it): the CTA's arrival. It stamps its row of done_ns (the host takes an iteration's latest stamp as its end) and
 * adds one to the iteration's slot; the slot's k-th use (iteration slot + k * RING) is complete at (k + 1) *
 * gridDim.x arrivals. Only the iterations the host hears of (`done`, across PCIe, behind a system-scope fence: the
 * last one it asked for, and every PUBLISH_EVERY-th) read the count back: their adds are acq_rel (release: this
 * CTA's writes, stamps included, before it; acquire: the last CTA sees every CTA's), and the last CTA to arrive
 * publishes the iteration to the others (`finished[RING]`, which only paces the ring: a CTA may be up to RING
 * iterations past it; the slowest CTA never waits on it and moves it every PUBLISH_EVERY < RING iterations) and to
 * the host. At the last iteration asked for every CTA's `go` is that iteration + 1 (it ran the iteration, so read
 * a go above it, and go is no higher), so all of them release. Every other arrival is a relaxed reduction that the
 * CTA does not wait for: dependencies between tiles go through the counters, not through arrivals. The writes of
 * `done` land in order: every earlier one is released by its CTA's next acq_rel arrival, which the next publisher
 * acquires.
 *
 * Why not the plain way (a fence, an add whose count every CTA reads back, and the host told every iteration): the
 * last CTA to arrive starts its next iteration late and so tends to be last again, the CTAs' fences wait for their
 * tiles' stores, and each CTA waits an L2 round trip for its count. On an H100 chain64 took 7.6 us an iteration with
 * a 5.0 us tile that way, 5.5 with a 4.7 us tile reading back every count, and 4.6 with a 4.3 us tile reading back
 * only the published ones. Inlined: out of line (__noinline__) tasks1000 took 1.82 against 1.88 us an edge and
 * chain64 4.55 against 4.6, but block-s128 44.5 against 43.3 and mlp-b8 100.1 against 99.1 (one H100, two sessions).
 * With PUBLISH_EVERY 1 every arrival is of the acq_rel kind, so `done` moves as each iteration ends.
 * Returns the stamp (the GPU clock as the CTA arrived), which paces the looks for a stop (stop_between). */
__device__ __forceinline__ unsigned long long arrive(const Program& p, unsigned long long it, unsigned long long go) {
  const unsigned long long now = arkdma::now_ns();
  p.done_ns[(it % RING) * gridDim.x + blockIdx.x] = now;
  unsigned long long* slot = p.finished + it % RING;
  if (!(it + 1ull >= go || (it + 1ull) % PUBLISH_EVERY == 0ull)) {
    asm volatile("red.relaxed.gpu.global.add.u64 [%0], 1;" ::"l"(slot) : "memory");
    return now;
  }
  unsigned long long n;
  asm volatile("atom.acq_rel.gpu.global.add.u64 %0, [%1], 1;" : "=l"(n) : "l"(slot) : "memory");
  if (n + 1ull != (it / RING + 1ull) * gridDim.x) return now;
  atomicMax(p.finished + RING, it + 1);
  __threadfence_system();
  *(volatile unsigned long long*)&p.control->done = it + 1;
  return now;
}

#if ARK_GRAPH_COPIES
/* CTA 0's thread 0 at the end of a run of the kernel's graph: queue the graph again (unless stopping) to go on
 * from iteration `it`. */
__device__ __forceinline__ void relaunch(const Program& p, unsigned long long it) {
  if (stopping(p) || host_stop(p)) return;
  p.finished[SEGMENT_AT] = it;
  __threadfence();
  const cudaError_t e = cudaGraphLaunch(cudaGetCurrentGraphExec(), cudaStreamGraphTailLaunch);
  if (e != cudaSuccess) fault(p, FAULT_GRAPH, -1, -1, 0ull, 0ull, RELAUNCH_FAILED + (unsigned)e);
}
#endif

}  // namespace ark

#endif
