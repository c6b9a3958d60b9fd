// The software engine's core: queues, region table, doorbell handling, validation order, the
// completion-word rules and the polling thread. Executors (host memcpy, CUDA) move the bytes.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "arkdma/abi.h"
#include "region.h"

namespace arkdma {

using Clock = std::chrono::steady_clock;
using Deadline = Clock::time_point;

inline Deadline deadline_after(double seconds) {
  return Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
}

// Result codes of the C API (host/native.py maps them to Python exceptions).
enum Status : int {
  OK = 0,
  BAD_ARGUMENT = 1,
  TIMED_OUT = 2,
  UNAVAILABLE = 3,
  DRIVER_FAILURE = 4,
};

enum class ExecutorKind : int { HOST = 0, CUDA = 1 };

enum class Placement : int { HOST = 0, DEVICE = 1 };

struct Config {
  uint32_t num_queues = 8;
  uint32_t slots = 64;
  uint32_t num_regions = 16;
  uint32_t errlog_depth = 16;
  uint32_t streams_per_queue = 1;   // CUDA: copy streams per queue
  bool batch_copies = true;         // CUDA: one cuMemcpyBatchAsync per stream and segment when available
  bool merge = true;                // CUDA: merge contiguous descriptors into one copy
  uint32_t stop_check_every = 64;   // loop iterations between two looks at the stop flag
  int64_t spin_before_sleep = -1;   // idle iterations before the loop sleeps; -1: never sleep
  uint32_t sleep_us = 20;
  int32_t device = 0;               // CUDA device ordinal
  std::vector<int> cpus;            // CPUs the engine thread may run on; empty: any
};

// A validated descriptor with its bus addresses resolved.
struct Op {
  uint64_t index;
  arkdma_descriptor d;
  uint64_t src;
  uint64_t dst;
};

// Pinned (for CUDA: mapped) memory: the host pointer and the address GPU code uses.
struct PinnedMemory {
  uint8_t* host = nullptr;
  uint64_t device = 0;
  size_t bytes = 0;
};

struct QueueStateOut {
  uint32_t enabled, halted, busy, error, error_cookie, error_index;
  uint64_t completion_word;
};

struct ErrorLogEntry {
  uint32_t queue, code, cookie, index;
};

// Indices of Engine::stats(); names in host/native.py.
enum Stat : int {
  STAT_POLLS = 0,        // loop iterations
  STAT_DRAINS,           // polls that issued at least one descriptor
  STAT_ISSUED,           // descriptors handed to the executor
  STAT_DRAIN_NS,         // time spent issuing (doorbell seen to completion write enqueued)
  STAT_COPIES,           // copy operations started (after merging)
  STAT_API_CALLS,        // CUDA driver calls made on the issue path
  STAT_COMPLETIONS,      // completion words written or enqueued
  STAT_NS_COPY,          // time inside cuMemcpyAsync / cuMemcpyBatchAsync
  STAT_NS_WRITE,         // time inside cuStreamWriteValue64 (completion words and IMM)
  STAT_NS_RECORD,        // time inside cuEventRecord for completion records
  STAT_NS_JOIN,          // time joining streams (cuEventRecord + cuStreamWaitEvent)
  STAT_NS_QUERY,         // time inside cuEventQuery (retiring)
  STAT_COUNT
};

class Engine;

// Where an executor could not start a copy: the first descriptor whose data did not move.
struct Failure {
  bool failed = false;
  uint64_t index = 0;
  uint32_t cookie = 0;
};

class Executor {
 public:
  explicit Executor(Engine& engine) : engine_(engine) {}
  virtual ~Executor() = default;
  // Makes the executor usable from the calling thread (the CUDA context current).
  virtual bool bind_thread() { return true; }
  virtual bool alloc(size_t bytes, Placement where, PinnedMemory& out) = 0;
  virtual void free(PinnedMemory& mem, Placement where) = 0;
  // Synchronous copies out of and into GPU memory (host memory is reached through its pointer).
  virtual bool read_device(uint64_t bus, void* dst, size_t n) = 0;
  virtual bool write_device(uint64_t bus, const void* src, size_t n) = 0;
  virtual bool open_queues(uint32_t /*count*/) { return true; }
  // Whether [addr, addr + size) is memory this executor can reach; sets the engine's error otherwise.
  virtual bool check_region(uint64_t /*addr*/, uint64_t /*size*/) { return true; }
  // Executes or enqueues a validated descriptor; false when the data could not be moved (BUS_ERROR).
  virtual bool submit(uint32_t q, const Op& op) = 0;
  // Writes `word` at `addr` once everything submitted to q so far has completed.
  virtual bool completion(uint32_t q, uint64_t addr, uint64_t word) = 0;
  // Retires what finished (Engine::retire); called from the poll loop, must be cheap.
  virtual void progress(uint32_t /*q*/) {}
  virtual bool inflight(uint32_t /*q*/) const { return false; }
  // Waits until q has nothing in flight; false when the deadline passed first.
  virtual bool drain(uint32_t /*q*/, Deadline /*deadline*/) { return true; }
  // Retires until q has completed `count` descriptors or has nothing in flight; false on deadline.
  virtual bool retire_until(uint32_t q, uint64_t /*count*/, Deadline deadline) { return drain(q, deadline); }
  // After submit() or completion() returned false: which descriptor failed (cleared by the call).
  virtual Failure take_failure(uint32_t /*q*/) { return Failure{}; }
  // The queue starts again at producer index `start` (enable, reset); nothing of it is in flight.
  virtual void restart(uint32_t /*q*/, uint64_t /*start*/) {}

 protected:
  Engine& engine_;
};

std::unique_ptr<Executor> make_host_executor(Engine& engine);
std::unique_ptr<Executor> make_cuda_executor(Engine& engine, std::string& error);

class Engine {
 public:
  // Builds an engine with its queue memory; nullptr and `error` set when it cannot.
  static std::unique_ptr<Engine> create(const Config& config, ExecutorKind kind, std::string& error);
  ~Engine();

  const Config& config() const { return config_; }
  Executor& executor() { return *executor_; }

  // Thread control.
  int start(std::string& error);
  int stop(double timeout, std::string& error);
  bool running() const { return running_.load(std::memory_order_acquire); }

  // Host control: run on the engine thread (or inline while it is stopped).
  int set_region(uint32_t region, uint64_t addr, uint64_t size, uint32_t perms, double timeout, std::string& error);
  int configure_queue(uint32_t q, uint32_t region, uint64_t offset, uint64_t start, double timeout, std::string& error);
  int enable_queue(uint32_t q, double timeout, std::string& error);
  int disable_queue(uint32_t q, double timeout, std::string& error);
  int reset(double timeout, std::string& error);
  int queue_state(uint32_t q, QueueStateOut& out, double timeout, std::string& error);
  int pop_error_log(std::vector<ErrorLogEntry>& out, size_t max, double timeout, std::string& error);
  int errlog_overflow(bool& out, double timeout, std::string& error);
  int clear_errlog_overflow(double timeout, std::string& error);
  int counters(uint64_t& descriptors, uint64_t& bytes, double timeout, std::string& error);
  int busy(bool& out, double timeout, std::string& error);

  // Producer side: the doorbell store, then (while the thread runs) a bounded wait until the engine
  // has seen it, so consecutive CPU doorbells are not merged the way polled memory would merge them.
  int ring(uint32_t q, uint32_t value, double timeout, std::string& error);
  int queue_pointers(uint32_t q, uint64_t out[4], std::string& error) const;

  void stats(uint64_t* out, int n) const;

  // For executors, on the thread that runs the engine.
  void retire(uint32_t q, uint64_t descriptors, uint64_t bytes);
  uint64_t completed(uint32_t q) const { return queues_[q]->completed; }
  void note_error(const std::string& message);
  void count(Stat s, uint64_t n = 1) { stats_[s].fetch_add(n, std::memory_order_relaxed); }
  std::string take_note();

 private:
  struct Queue {
    uint8_t* window = nullptr;
    uint32_t* doorbell = nullptr;
    uint64_t window_device = 0;
    uint64_t doorbell_device = 0;
    // configuration, loaded at enable
    uint64_t start = 0;
    uint32_t completion_region = 0;
    uint64_t completion_offset = 0;
    // state: the engine thread's (or the caller's while the thread is stopped)
    bool enabled = false;
    bool halted = false;
    uint32_t error = ARKDMA_ERR_NONE;
    uint32_t error_cookie = 0;
    uint32_t error_index = 0;
    uint64_t posted = 0;     // producer index, extended past 32 bits
    uint64_t issued = 0;     // handed to the executor
    uint64_t completed = 0;  // retired by the executor
    bool pending = false;    // a doorbell error, taken once the posted work has been issued
    uint32_t pending_code = 0;
    uint32_t pending_value = 0;
    bool written_valid = false;
    uint64_t written = 0;    // last completion word written (or enqueued)
    uint32_t seen = 0;       // last doorbell value read
    // published for ring() waiters on other threads
    std::atomic<uint32_t> seen_published{0};
    std::atomic<bool> accepting{false};
  };

  struct Command {
    std::function<int()> fn;
    int status = OK;
    bool done = false;
  };

  Engine(const Config& config);
  bool build(ExecutorKind kind, std::string& error);
  void clear_queue_state(Queue& q);
  void loop();
  bool poll(uint32_t q);
  void apply_doorbell(uint32_t q, uint32_t value);
  void drain(uint32_t q);
  void halt(uint32_t q, uint32_t code, uint32_t cookie, uint32_t index, bool write);
  bool write_completion(uint32_t q, uint64_t word);
  void fail_bus(uint32_t q, uint64_t index, uint32_t cookie);
  uint32_t completion_location_error(const Queue& q) const;
  void publish(Queue& q);
  void rebuild_active();
  bool queue_busy(uint32_t q);
  int call(std::function<int()> fn, double timeout, std::string& error);
  void serve_command();
  int check_queue(uint32_t q, std::string& error) const;

  Config config_;
  std::unique_ptr<Executor> executor_;
  PinnedMemory queue_memory_;
  std::vector<std::unique_ptr<Queue>> queues_;
  std::vector<uint32_t> active_;  // enabled queues, polled in order
  std::vector<Region> regions_;
  std::deque<ErrorLogEntry> errlog_;
  bool errlog_overflow_ = false;
  uint64_t descriptors_ = 0;
  uint64_t bytes_ = 0;
  std::atomic<uint64_t> stats_[STAT_COUNT] = {};

  std::mutex control_mu_;  // one host-control call at a time
  std::mutex command_mu_;
  std::condition_variable command_cv_;
  std::shared_ptr<Command> command_;
  std::atomic<bool> command_pending_{false};
  std::atomic<bool> stop_{false};
  std::atomic<bool> running_{false};
  std::atomic<bool> exited_{true};
  std::thread thread_;

  std::mutex note_mu_;
  std::string note_;  // the last error an executor reported
};

}  // namespace arkdma
