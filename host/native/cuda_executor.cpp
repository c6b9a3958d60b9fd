// The CUDA executor: copies run on the GPU's copy engines, enqueued on per-queue streams; the
// completion word is written by cuStreamWriteValue64 on a stream after the copies it covers, so
// the engine thread never waits for data. Contiguous descriptors are merged into one copy, a
// segment of independent copies is split over the queue's streams (one batch call per stream
// where the driver has cuMemcpyBatchAsync), and events join the streams wherever order matters:
// before a FENCE or IMM descriptor and before every completion write, so completions stay in order.
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <deque>

#include "cuda_driver.h"
#include "engine.h"

namespace arkdma {

namespace {

using namespace cuda;

constexpr size_t MAX_SEGMENT = 256;  // copies gathered before they are enqueued anyway

// No iostreams in this library: a build that links libstdc++ statically (some GPU images' compilers
// do) shares the process with the system's copy, and locale facets from the two get mixed up.
std::string hex(uint64_t v) {
  char buf[24];
  std::snprintf(buf, sizeof(buf), "0x%llx", static_cast<unsigned long long>(v));
  return buf;
}

class CudaExecutor final : public Executor {
 public:
  CudaExecutor(Engine& engine, const Driver* cu, CUdevice device, CUcontext context)
      : Executor(engine), cu_(cu), device_(device), context_(context) {}

  ~CudaExecutor() override {
    cu_->cuCtxSetCurrent(context_);
    for (auto& q : queues_) {
      for (auto& r : q.records) cu_->cuEventDestroy(r.event);
      for (CUevent e : q.join_events) cu_->cuEventDestroy(e);
      for (CUstream s : q.streams) cu_->cuStreamDestroy(s);
    }
    for (CUevent e : spare_events_) cu_->cuEventDestroy(e);
    cu_->cuDevicePrimaryCtxRelease(device_);
  }

  bool bind_thread() override { return ok(cu_->cuCtxSetCurrent(context_), "cuCtxSetCurrent"); }

  bool alloc(size_t bytes, Placement where, PinnedMemory& out) override {
    out = PinnedMemory{};
    out.bytes = bytes;
    if (where == Placement::DEVICE) {
      CUdeviceptr p = 0;
      if (!ok(cu_->cuMemAlloc(&p, bytes ? bytes : 1), "cuMemAlloc")) return false;
      out.device = p;
      return true;
    }
    void* h = nullptr;
    if (!ok(cu_->cuMemHostAlloc(&h, bytes ? bytes : 1, MEMHOSTALLOC_PORTABLE | MEMHOSTALLOC_DEVICEMAP),
            "cuMemHostAlloc")) {
      return false;
    }
    CUdeviceptr d = 0;
    if (!ok(cu_->cuMemHostGetDevicePointer(&d, h, 0), "cuMemHostGetDevicePointer")) {
      cu_->cuMemFreeHost(h);
      return false;
    }
    out.host = static_cast<uint8_t*>(h);
    out.device = d;
    return true;
  }

  void free(PinnedMemory& mem, Placement where) override {
    if (where == Placement::DEVICE) {
      if (mem.device) cu_->cuMemFree(mem.device);
    } else if (mem.host) {
      cu_->cuMemFreeHost(mem.host);
    }
    mem = PinnedMemory{};
  }

  bool read_device(uint64_t bus, void* dst, size_t n) override {
    return n == 0 || ok(cu_->cuMemcpyDtoH(dst, bus, n), "cuMemcpyDtoH");
  }

  bool write_device(uint64_t bus, const void* src, size_t n) override {
    return n == 0 || ok(cu_->cuMemcpyHtoD(bus, src, n), "cuMemcpyHtoD");
  }

  bool open_queues(uint32_t count) override {
    const uint32_t streams = engine_.config().streams_per_queue;
    queues_.resize(count);
    for (auto& q : queues_) {
      q.streams.assign(streams, nullptr);
      q.join_events.assign(streams, nullptr);
      q.ops.assign(streams, 0);
      q.joined.assign(streams, std::vector<uint64_t>(streams, 0));
      for (uint32_t s = 0; s < streams; ++s) {
        if (!ok(cu_->cuStreamCreate(&q.streams[s], CU_STREAM_NON_BLOCKING), "cuStreamCreate")) return false;
        if (!ok(cu_->cuEventCreate(&q.join_events[s], CU_EVENT_DISABLE_TIMING), "cuEventCreate")) return false;
      }
    }
    return true;
  }

  bool check_region(uint64_t addr, uint64_t size) override {
    for (uint64_t a : {addr, addr + (size ? size - 1 : 0)}) {
      unsigned type = 0;
      CUresult rc = cu_->cuPointerGetAttribute(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, a);
      if (rc != CUDA_SUCCESS) {
        engine_.note_error("bus address " + hex(a) + " is not memory CUDA can reach (" +
                           cu_->describe("cuPointerGetAttribute", rc) +
                           "): register GPU memory or pinned host memory (the engine's alloc(), CuPy, "
                           "PyTorch, or host memory pinned with cudaHostRegister)");
        return false;
      }
    }
    return true;
  }

  bool submit(uint32_t qi, const Op& op) override {
    Queue& q = queues_[qi];
    const arkdma_descriptor& d = op.d;
    if (d.flags & ARKDMA_FLAG_IMM) {
      // The signal after data: after every earlier write of the queue, as one 8-byte store.
      if (!flush(qi)) return false;
      const uint32_t s = q.last;
      if (!join_all(qi, s)) return fail(qi, op.index, d.cookie);
      if (!ok(timed(STAT_NS_WRITE,
                    [&] { return cu_->cuStreamWriteValue64(q.streams[s], op.dst, d.src_offset, CU_STREAM_WRITE_VALUE_DEFAULT); }),
              "cuStreamWriteValue64 (IMM)")) {
        return fail(qi, op.index, d.cookie);
      }
      engine_.count(STAT_API_CALLS);
      engine_.count(STAT_COPIES);
      ++q.ops[s];
      q.unrecorded = true;
      q.enqueued_upto = op.index + 1;
      q.open_bytes += ARKDMA_IMM_BYTES;
      return true;
    }
    const bool fence = d.flags & ARKDMA_FLAG_FENCE;
    if (!fence && engine_.config().merge && !q.segment.empty()) {
      Group& g = q.segment.back();
      if (g.src_region == d.src_region && g.dst_region == d.dst_region && g.src + g.length == op.src &&
          g.dst + g.length == op.dst && g.end == op.index) {
        g.length += d.length;
        g.end = op.index + 1;
        return true;
      }
    }
    if (fence && !flush(qi)) return false;
    q.segment.push_back(Group{op.dst, op.src, d.length, d.src_region, d.dst_region, fence, op.index, op.index + 1,
                              d.cookie});
    if (q.segment.size() >= MAX_SEGMENT) return flush(qi);
    return true;
  }

  bool completion(uint32_t qi, uint64_t addr, uint64_t word) override {
    Queue& q = queues_[qi];
    if (!flush(qi)) return false;
    const uint32_t s = q.last;
    if (!join_all(qi, s)) return fail(qi, q.enqueued_upto, 0);
    if (!ok(timed(STAT_NS_WRITE,
                  [&] { return cu_->cuStreamWriteValue64(q.streams[s], addr, word, CU_STREAM_WRITE_VALUE_DEFAULT); }),
            "cuStreamWriteValue64 (completion word at " + hex(addr) + ")")) {
      return fail(qi, q.enqueued_upto, 0);
    }
    engine_.count(STAT_API_CALLS);
    ++q.ops[s];
    return record(qi, s);
  }

  void progress(uint32_t qi) override {
    Queue& q = queues_[qi];
    while (!q.records.empty()) {
      Record& r = q.records.front();
      CUresult rc = timed(STAT_NS_QUERY, [&] { return cu_->cuEventQuery(r.event); });
      if (rc == CUDA_ERROR_NOT_READY) return;
      if (rc != CUDA_SUCCESS) {
        // A sticky CUDA error: nothing on this context will finish. Report; wait_idle times out.
        ok(rc, "cuEventQuery");
        return;
      }
      const uint64_t done = engine_.completed(qi);
      engine_.retire(qi, r.upto > done ? r.upto - done : 0, r.bytes);
      spare_events_.push_back(r.event);
      q.records.pop_front();
    }
  }

  bool inflight(uint32_t qi) const override {
    const Queue& q = queues_[qi];
    return !q.records.empty() || !q.segment.empty() || q.unrecorded;
  }

  bool drain(uint32_t qi, Deadline deadline) override { return retire_until(qi, UINT64_MAX, deadline); }

  bool retire_until(uint32_t qi, uint64_t count, Deadline deadline) override {
    Queue& q = queues_[qi];
    if (!seal(qi)) return false;
    for (uint32_t spins = 0;; ++spins) {
      progress(qi);
      if (q.records.empty() || engine_.completed(qi) >= count) return true;
      if (spins > 64) {
        if (Clock::now() > deadline) return false;
        std::this_thread::yield();
      }
    }
  }

  void restart(uint32_t qi, uint64_t start) override {
    Queue& q = queues_[qi];
    q.segment.clear();
    q.enqueued_upto = start;
    q.open_bytes = 0;
    q.failure = Failure{};
  }

  Failure take_failure(uint32_t qi) override {
    Queue& q = queues_[qi];
    Failure f = q.failure;
    q.failure = Failure{};
    return f;
  }

 private:
  struct Group {
    CUdeviceptr dst, src;
    uint64_t length;
    uint16_t src_region, dst_region;
    bool fence;
    uint64_t first, end;  // producer indices covered: [first, end)
    uint32_t cookie;      // of the first descriptor
  };

  struct Record {
    CUevent event;
    uint64_t upto;   // every descriptor below this index is done when the event is
    uint64_t bytes;  // payload bytes completed since the previous record
  };

  struct Queue {
    std::vector<CUstream> streams;
    std::vector<CUevent> join_events;
    std::vector<uint64_t> ops;                  // operations enqueued per stream
    std::vector<std::vector<uint64_t>> joined;  // joined[s][t]: ops of t that s already waits for
    uint32_t next = 0;                          // where the next segment's copies start
    uint32_t last = 0;                          // stream of the latest operation
    std::vector<Group> segment;                 // gathered, not yet enqueued
    uint64_t enqueued_upto = 0;
    uint64_t open_bytes = 0;                    // enqueued since the last record
    bool unrecorded = false;                    // operations enqueued since the last record
    std::deque<Record> records;
    Failure failure;
  };

  // Times one driver call into a STAT_NS_* counter.
  template <class F>
  CUresult timed(Stat stat, F&& call) {
    const auto t0 = Clock::now();
    CUresult rc = call();
    engine_.count(stat, std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - t0).count());
    return rc;
  }

  bool ok(CUresult rc, const std::string& what) {
    if (rc == CUDA_SUCCESS) return true;
    engine_.note_error(cu_->describe(what.c_str(), rc));
    return false;
  }

  bool fail(uint32_t qi, uint64_t index, uint32_t cookie) {
    Queue& q = queues_[qi];
    if (!q.failure.failed) q.failure = Failure{true, index, cookie};
    q.segment.clear();
    if (q.enqueued_upto > index) q.enqueued_upto = index;
    return false;
  }

  // Makes stream s wait for everything enqueued so far on the queue's other streams. Joins are
  // transitive: waiting for t also covers what t already waited for, so the most recently used
  // streams (s-1, s-2, ...) go first and the rest usually need nothing.
  bool join_all(uint32_t qi, uint32_t s) {
    Queue& q = queues_[qi];
    const uint32_t n = static_cast<uint32_t>(q.streams.size());
    for (uint32_t k = 1; k < n; ++k) {
      const uint32_t t = (s + n - k) % n;
      if (q.ops[t] <= q.joined[s][t]) continue;
      const CUresult rc = timed(STAT_NS_JOIN, [&] {
        CUresult r = cu_->cuEventRecord(q.join_events[t], q.streams[t]);
        return r != CUDA_SUCCESS ? r : cu_->cuStreamWaitEvent(q.streams[s], q.join_events[t], 0);
      });
      if (!ok(rc, "joining streams (cuEventRecord, cuStreamWaitEvent)")) return false;
      engine_.count(STAT_API_CALLS, 2);
      for (uint32_t u = 0; u < n; ++u) q.joined[s][u] = std::max(q.joined[s][u], q.joined[t][u]);
      q.joined[s][t] = q.ops[t];
    }
    return true;
  }

  // Enqueues the gathered segment: contiguous blocks of copies on consecutive streams, in index
  // order, so a call the driver refuses leaves only earlier descriptors enqueued.
  bool flush(uint32_t qi) {
    Queue& q = queues_[qi];
    if (q.segment.empty()) return true;
    const uint32_t nstreams = static_cast<uint32_t>(q.streams.size());
    const bool fenced = q.segment.front().fence;
    // A FENCE copy (always first in its segment) starts after everything before it. A lone copy stays
    // on the stream used last, so its completion needs no join: streams pay off only for segments.
    const uint32_t base = fenced || q.segment.size() == 1 ? q.last : q.next;
    if (fenced && !join_all(qi, base)) return fail(qi, q.segment.front().first, q.segment.front().cookie);
    const size_t n = q.segment.size();
    const size_t per = (n + nstreams - 1) / nstreams;
    uint32_t blocks = 0;
    for (size_t lo = 0; lo < n; lo += per, ++blocks) {
      const uint32_t s = (base + blocks) % nstreams;
      dsts_.clear();
      srcs_.clear();
      sizes_.clear();
      groups_.clear();
      for (size_t i = lo; i < n && i < lo + per; ++i) {
        const Group& g = q.segment[i];
        if (g.length == 0) continue;
        dsts_.push_back(g.dst);
        srcs_.push_back(g.src);
        sizes_.push_back(g.length);
        groups_.push_back(&g);
      }
      if (dsts_.empty()) continue;
      const size_t refused = enqueue_copies(q.streams[s]);
      if (refused < groups_.size()) return fail(qi, groups_[refused]->first, groups_[refused]->cookie);
      ++q.ops[s];
      engine_.count(STAT_COPIES, dsts_.size());
    }
    q.last = (base + blocks - 1) % nstreams;
    q.next = (base + blocks) % nstreams;
    for (const Group& g : q.segment) q.open_bytes += g.length;
    q.enqueued_upto = q.segment.back().end;
    q.unrecorded = true;
    q.segment.clear();
    return true;
  }

  // Enqueues dsts_/srcs_/sizes_ on `stream`; returns how many went in before a call failed (all: n).
  size_t enqueue_copies(CUstream stream) {
    const size_t n = dsts_.size();
    if (n > 1 && engine_.config().batch_copies && cu_->cuMemcpyBatchAsync != nullptr) {
      CUmemcpyAttributes attr{};
      attr.srcAccessOrder = CU_MEMCPY_SRC_ACCESS_ORDER_STREAM;
      size_t attr_index = 0;
      engine_.count(STAT_API_CALLS);
      if (ok(timed(STAT_NS_COPY,
                   [&] {
                     return cu_->cuMemcpyBatchAsync(dsts_.data(), srcs_.data(), sizes_.data(), n, &attr, &attr_index,
                                                    1, stream);
                   }),
             "cuMemcpyBatchAsync")) {
        return n;
      }
      // A refused batch enqueued nothing: copy by copy finds the descriptor the driver refuses.
    }
    for (size_t i = 0; i < n; ++i) {
      engine_.count(STAT_API_CALLS);
      if (!ok(timed(STAT_NS_COPY, [&] { return cu_->cuMemcpyAsync(dsts_[i], srcs_[i], sizes_[i], stream); }),
              "cuMemcpyAsync(" + hex(dsts_[i]) + " <- " + hex(srcs_[i]) + ", " + std::to_string(sizes_[i]) + ")")) {
        return i;
      }
    }
    return n;
  }

  // Records an event on stream s (which has joined every other stream) covering all enqueued work.
  bool record(uint32_t qi, uint32_t s) {
    Queue& q = queues_[qi];
    CUevent ev = nullptr;
    if (!spare_events_.empty()) {
      ev = spare_events_.back();
      spare_events_.pop_back();
    } else if (!ok(cu_->cuEventCreate(&ev, CU_EVENT_DISABLE_TIMING), "cuEventCreate")) {
      return fail(qi, q.enqueued_upto, 0);
    }
    if (!ok(timed(STAT_NS_RECORD, [&] { return cu_->cuEventRecord(ev, q.streams[s]); }), "cuEventRecord")) {
      spare_events_.push_back(ev);
      return fail(qi, q.enqueued_upto, 0);
    }
    engine_.count(STAT_API_CALLS);
    q.records.push_back(Record{ev, q.enqueued_upto, q.open_bytes});
    q.open_bytes = 0;
    q.unrecorded = false;
    return true;
  }

  // Enqueues what was gathered and covers it with a record, so drain() can wait for it.
  bool seal(uint32_t qi) {
    Queue& q = queues_[qi];
    if (!flush(qi)) return false;
    if (!q.unrecorded) return true;
    return join_all(qi, q.last) && record(qi, q.last);
  }

  const Driver* cu_;
  CUdevice device_;
  CUcontext context_;
  std::vector<Queue> queues_;
  std::vector<CUevent> spare_events_;
  std::vector<CUdeviceptr> dsts_, srcs_;
  std::vector<size_t> sizes_;
  std::vector<const Group*> groups_;
};

}  // namespace

std::unique_ptr<Executor> make_cuda_executor(Engine& engine, std::string& error) {
  const Driver* cu = load_driver(error);
  if (cu == nullptr) return nullptr;
  int count = 0;
  CUresult rc = cu->cuDeviceGetCount(&count);
  if (rc != CUDA_SUCCESS || count == 0) {
    error = "no CUDA GPU found (" + (rc ? cu->describe("cuDeviceGetCount", rc) : std::string("0 devices")) +
            "); use engine software-host";
    return nullptr;
  }
  const int ordinal = engine.config().device;
  if (ordinal < 0 || ordinal >= count) {
    error = "CUDA device " + std::to_string(ordinal) + " does not exist (this machine has " + std::to_string(count) +
            ": 0.." + std::to_string(count - 1) + ")";
    return nullptr;
  }
  CUdevice device = 0;
  if ((rc = cu->cuDeviceGet(&device, ordinal)) != CUDA_SUCCESS) {
    error = cu->describe("cuDeviceGet", rc);
    return nullptr;
  }
  int mem_ops = 0;
  rc = cu->cuDeviceGetAttribute(&mem_ops, CU_DEVICE_ATTRIBUTE_CAN_USE_64_BIT_STREAM_MEM_OPS, device);
  if (rc != CUDA_SUCCESS || !mem_ops) {
    error = "CUDA device " + std::to_string(ordinal) +
            " cannot write 64-bit values from a stream (CAN_USE_64_BIT_STREAM_MEM_OPS is 0), which the completion "
            "words need; use engine software-host";
    return nullptr;
  }
  CUcontext context = nullptr;
  if ((rc = cu->cuDevicePrimaryCtxRetain(&context, device)) != CUDA_SUCCESS) {
    error = cu->describe("cuDevicePrimaryCtxRetain", rc);
    return nullptr;
  }
  if ((rc = cu->cuCtxSetCurrent(context)) != CUDA_SUCCESS) {
    error = cu->describe("cuCtxSetCurrent", rc);
    cu->cuDevicePrimaryCtxRelease(device);
    return nullptr;
  }
  return std::make_unique<CudaExecutor>(engine, cu, device, context);
}

}  // namespace arkdma
