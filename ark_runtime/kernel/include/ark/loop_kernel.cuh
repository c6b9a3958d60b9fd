/* The resident loop: ark_loop, the kernel every generated source ends with (included last, after namespace gen, whose
 * run_tile and preload_tile it calls), and the copy op's dispatch. One CTA per SM plays its instruction stream each
 * iteration (loop.cuh says how iterations are driven, counted and published). */
#ifndef ARK_LOOP_KERNEL_CUH
#define ARK_LOOP_KERNEL_CUH

namespace ark {
/* The copy op: SM stores or the engine's queue, per the op's entry in p.copies (timed as every tile is). */
__device__ __forceinline__ unsigned long long copy_tile(const Program& p, const arkdma_queue& q, int tile, int op,
                                                        const void* src, void* dst, unsigned long long n) {
  const int4 how = p.copies[op];
  unsigned rc = ARKDMA_DEV_OK;
  if (how.x == 0) {
    sm_copy(src, dst, n);
    __threadfence_system();
    __syncthreads();
  } else if (threadIdx.x == 0) {
#if ARK_GRAPH_COPIES
    if (how.x == 2) {
      const unsigned d = graph_copy(p.graphs + how.y * GRAPH_POOL, p.graph_words + how.y * GRAPH_WORDS, p.budget_ns,
                                    how.z != 0);
      return d == 0u ? 0ull : ((unsigned long long)FAULT_GRAPH << 32) | d;
    }
#endif
    rc = dma_copy(q, how.y, how.z, n);
  }
  return rc == ARKDMA_DEV_OK ? 0ull : ((unsigned long long)FAULT_DMA << 32) | rc;
}

#if ARK_WORLD
/* Thread 0, after signal_counter in a World's kernel: the same add to the copies of the counter that other ranks
 * wait on (`lo`, `hi`: the 64-bit mask of those ranks), each a release at system scope, so what the tile wrote
 * (here or in a peer's memory) is visible to the rank that acquires it. Each rank's counter array is at word
 * gen::PEERS_AT + rank of p.tensors, as this rank maps it. */
__device__ __forceinline__ void signal_peers(const Program& p, int counter, unsigned lo, unsigned hi) {
  unsigned long long ranks = ((unsigned long long)hi << 32) | lo;
  unsigned long long* const* peers = (unsigned long long* const*)(p.tensors + gen::PEERS_AT);
  while (ranks != 0ull) {
    const int k = __ffsll((long long)ranks) - 1;
    ranks &= ranks - 1;
    asm volatile("red.release.sys.global.add.u64 [%0], 1;" ::"l"(peers[k] + counter) : "memory");
  }
}
#endif
}  // namespace ark

extern "C" __global__ void __launch_bounds__(THREADS, ARK_MIN_BLOCKS) ark_loop(const __grid_constant__ ark::Program p,
                                                                           const __grid_constant__ arkdma_queue q) {
  extern __shared__ __align__(128) unsigned char smem[];
  __shared__ int4 held[2 * ark::CHUNK];  // instructions [first, first + CHUNK) of this CTA's stream
#if ARK_TENSORS_SHARED
  __shared__ void* tensors[gen::NUM_TENSORS];  // the tensors' addresses, read once
  for (int i = threadIdx.x; i < gen::NUM_TENSORS; i += blockDim.x) tensors[i] = p.tensors[i];
  void* const* T = tensors;
#else
  void* const* T = p.tensors;
#endif
  const int begin = p.stream_start[blockIdx.x], end = p.stream_start[blockIdx.x + 1];
  int first = end;  // nothing staged yet
  int preloaded = -1;  // the run instruction whose tile's first weight slices were loaded before its waits
  unsigned long long go = 0, ring = 0;  // thread 0: go and iterations published, as last read
  unsigned long long arrived_ns = 0, next_stop_look = 0;  // thread 0: its last arrival, when to look for a stop
  const unsigned long long first_it = p.finished[ark::SEGMENT_AT];  // 0, or where the last run of the graph stopped
#if ARK_GRAPH_COPIES
  if (*(volatile unsigned*)p.fault_flag != 0u) return;  // relaunched as another CTA faulted
#endif
  for (unsigned long long it = first_it;; ++it) {
#if ARK_GRAPH_COPIES
    if (it == first_it + p.segment_iterations) {  // this run of the kernel's graph has made its device launches
      if (blockIdx.x == 0 && threadIdx.x == 0) ark::relaunch(p, it);
      break;
    }
#endif
    int stop = 0;
    if (threadIdx.x == 0 && !(go > it && it < ring + ark::RING)) {
      // the host's go (CTA 0 reads the host's words, the others its copies), and no more than RING
      // iterations ahead of the last published (its arrival slot is free); read again only when what was read last
      // does not let this iteration start. Volatile polls (no L1 invalidation per poll), then one fence.
      for (unsigned spins = 0;; ++spins) {
        go = blockIdx.x == 0 ? ark::forward_go(p) : *(volatile unsigned long long*)(p.finished + ark::GO_SEEN);
        ring = *(volatile unsigned long long*)(p.finished + ark::RING);
        if (go > it && it < ring + ark::RING) break;
        if (ark::stopping(p) || ((blockIdx.x == 0 || (spins & 1023u) == 1023u) && ark::host_stop(p))) {
          stop = 1;
          break;
        }
        __nanosleep(spins < 64 ? 100 : 1000);
      }
      __threadfence();  // what the host and the other CTAs wrote before go is visible to this CTA's loads
    }
#if !ARK_GRAPH_COPIES && !defined(ARK_NO_STOP_LOOK)
    // Not with graph copies: there the look kept a copy's gated graph from ever running (an H200, 2026-11-29), and
    // the kernel's graph relaunches every segment_iterations anyway, reading the host's stop each time (relaunch()).
    else if (threadIdx.x == 0) {
      // go lets this iteration start at once: with iterations queued the CTA may never wait for go, so it looks
      // for a stop here, every ark::STOP_POLL_NS at most (an iteration's cost: the compare, mostly)
      stop = ark::stop_between(p, arrived_ns, next_stop_look);
    }
#endif
    if (__syncthreads_or(stop)) break;
#if ARK_GRAPH_COPIES
    if (threadIdx.x == 0) ark::graph_ahead = go > it + 1 && it + 1 < first_it + p.segment_iterations;
#endif
    for (int i = begin; i < end && !stop; ++i) {
      if (i < first || i >= first + ark::CHUNK) {  // the same on every thread: stage the next chunk
        __syncthreads();
        first = i;
        for (int k = threadIdx.x; k < 2 * ark::CHUNK && i + k / 2 < end; k += blockDim.x) held[k] = p.ins[2 * i + k];
        __syncthreads();
      }
      const int4 in = held[2 * (i - first)], more = held[2 * (i - first) + 1];
      if (in.x == ark::INS_WAIT) {  // this wait and the ones right after it that are staged, together
        const auto staged = [&](int j) { return j < end && j < first + ark::CHUNK; };  // instruction j is in `held`
        int n = 1;
        while (staged(i + n) && held[2 * (i + n - first)].x == ark::INS_WAIT) ++n;
        if (staged(i + n) && held[2 * (i + n - first)].x == ark::INS_RUN) {
          const int4 r = held[2 * (i + n - first)], rm = held[2 * (i + n - first) + 1];
          // a warp the waits leave idle (they deal their words out from thread 0) loads the tile's tensor ids
          if (threadIdx.x == 32) gen::prefetch_op(r.z);
          // a tile whose weights depend on nothing waited for: their loads start now
          if (gen::preload_tile(p, T, r.y, r.z, rm.w, r.w, rm.x, rm.y, rm.z, smem)) preloaded = i + n;
        }
        stop = !ark::wait_all(p, held + 2 * (i - first), n, it);
        stop = __syncthreads_or(stop);
        if (stop && preloaded == i + n) {  // no tile will take the copies: they land before the CTA leaves
          ark::cp_async_commit();
          ark::cp_async_wait<0>();
        }
        i += n - 1;
      } else if (in.x == ark::INS_RUN) {
        // the tile's stamps are warp 1's: thread 0's signal (a release) then need not wait for their stores
        if (threadIdx.x == 32) p.tile_ns[2 * in.y] = arkdma::now_ns();
        const int mode = i == preloaded ? ark::TILE_PRELOADED : ark::TILE_RUN;
        preloaded = -1;
        const unsigned long long f = gen::run_tile(p, q, T, in.y, in.z, more.w, in.w, more.x, more.y, more.z, smem,
                                                   mode);
        if (__syncthreads_or(f != 0ull)) {
          if (f != 0ull) ark::fault(p, (unsigned)(f >> 32), in.y, -1, 0ull, 0ull, f & 0xffffffffull);
          stop = 1;
        }
        if (threadIdx.x == 32) p.tile_ns[2 * in.y + 1] = arkdma::now_ns();
      } else if (threadIdx.x == 0) {
        ark::signal_counter(p, in.y);
#if ARK_WORLD
        if ((more.x | more.y) != 0) ark::signal_peers(p, in.y, (unsigned)more.x, (unsigned)more.y);
#endif
      }
    }
    if (__syncthreads_or(stop)) break;
    if (threadIdx.x == 0) arrived_ns = ark::arrive(p, it, go);
  }
#if ARK_GRAPH_COPIES
  if (threadIdx.x == 0) ark::open_gates(p.copies, gen::NUM_OPS, p.graph_words);
#endif
}

#if ARK_GRAPH_COPIES
/* A gated copy graph's first node (copy.cuh): holds the copy until the gate reaches this launch's token. */
extern "C" __global__ void ark_graph_gate(const unsigned long long* words, int k) {
  const unsigned long long n = *(volatile const unsigned long long*)(words + 2 + k);
  while (*(volatile const unsigned long long*)(words + ark::GRAPH_GATE) < n) {
  }
}
#endif

#endif
