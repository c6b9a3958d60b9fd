// The software engine's core: the polling thread, doorbells, validation, completion words, control.
#include "engine.h"

#include <pthread.h>
#include <sched.h>

#include <algorithm>
#include <cstddef>
#include <cstring>

#include "validate.h"

namespace arkdma {

namespace {

constexpr size_t LINE = 64;  // each doorbell on its own cache line
constexpr uint64_t DOORBELL_MASK = 0xFFFFFFFFull;
constexpr double OVERFLOW_SETTLE_SECONDS = 5.0;  // how long a doorbell may wait for in-flight work to retire

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

inline uint64_t ns_since(Clock::time_point t0) {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - t0).count();
}

}  // namespace

Engine::Engine(const Config& config) : config_(config) {}

std::unique_ptr<Engine> Engine::create(const Config& config, ExecutorKind kind, std::string& error) {
  const auto& c = config;
  if (c.num_queues < 1 || c.num_queues > 896) {
    error = "num_queues must be 1..896, not " + std::to_string(c.num_queues);
    return nullptr;
  }
  if (c.slots < 2 || (c.slots & (c.slots - 1)) != 0 || c.slots > 65536) {
    error = "slots must be a power of two in 2..65536, not " + std::to_string(c.slots);
    return nullptr;
  }
  if (c.num_regions < 1 || c.num_regions > 128) {
    error = "num_regions must be 1..128, not " + std::to_string(c.num_regions);
    return nullptr;
  }
  if (c.errlog_depth < 1) {
    error = "errlog_depth must be at least 1";
    return nullptr;
  }
  if (c.streams_per_queue < 1 || c.streams_per_queue > 16) {
    error = "streams_per_queue must be 1..16, not " + std::to_string(c.streams_per_queue);
    return nullptr;
  }
  if (c.stop_check_every < 1) {
    error = "stop_check_every must be at least 1";
    return nullptr;
  }
  std::unique_ptr<Engine> engine(new Engine(config));
  if (!engine->build(kind, error)) return nullptr;
  return engine;
}

bool Engine::build(ExecutorKind kind, std::string& error) {
  if (kind == ExecutorKind::HOST) {
    executor_ = make_host_executor(*this);
  } else {
    executor_ = make_cuda_executor(*this, error);
    if (!executor_) return false;
  }
  const uint32_t n = config_.num_queues;
  const size_t doorbells = n * LINE;
  const size_t windows = static_cast<size_t>(n) * config_.slots * ARKDMA_DESCRIPTOR_BYTES;
  if (!executor_->alloc(doorbells + windows, Placement::HOST, queue_memory_)) {
    error = "could not allocate the queue windows and doorbells: " + take_note();
    return false;
  }
  std::memset(queue_memory_.host, 0, queue_memory_.bytes);
  for (uint32_t i = 0; i < n; ++i) {
    auto q = std::make_unique<Queue>();
    const size_t db = i * LINE;
    const size_t win = doorbells + static_cast<size_t>(i) * config_.slots * ARKDMA_DESCRIPTOR_BYTES;
    q->doorbell = reinterpret_cast<uint32_t*>(queue_memory_.host + db);
    q->window = queue_memory_.host + win;
    q->doorbell_device = queue_memory_.device ? queue_memory_.device + db : 0;
    q->window_device = queue_memory_.device ? queue_memory_.device + win : 0;
    queues_.push_back(std::move(q));
  }
  regions_.assign(config_.num_regions, Region{});
  if (!executor_->open_queues(n)) {
    error = "could not set up the queues' copy streams: " + take_note();
    return false;
  }
  return true;
}

Engine::~Engine() {
  std::string ignored;
  stop(10.0, ignored);
  if (thread_.joinable()) thread_.join();
  if (executor_) {
    executor_->bind_thread();
    for (uint32_t q = 0; q < queues_.size(); ++q) executor_->drain(q, deadline_after(5.0));
    executor_->free(queue_memory_, Placement::HOST);
  }
}

// --- thread ----------------------------------------------------------------------------------

int Engine::start(std::string& error) {
  std::lock_guard<std::mutex> control(control_mu_);
  if (running_.load()) return OK;
  if (thread_.joinable()) thread_.join();
  stop_.store(false);
  exited_.store(false);
  running_.store(true, std::memory_order_release);
  try {
    thread_ = std::thread(&Engine::loop, this);
  } catch (const std::exception& e) {
    running_.store(false);
    exited_.store(true);
    error = std::string("could not start the engine thread: ") + e.what();
    return DRIVER_FAILURE;
  }
  if (!config_.cpus.empty()) {
    cpu_set_t set;
    CPU_ZERO(&set);
    for (int cpu : config_.cpus) {
      if (cpu >= 0 && cpu < CPU_SETSIZE) CPU_SET(cpu, &set);
    }
    int rc = pthread_setaffinity_np(thread_.native_handle(), sizeof(set), &set);
    if (rc != 0) note_error("could not pin the engine thread to the requested CPUs: " + std::string(strerror(rc)));
  }
  return OK;
}

int Engine::stop(double timeout, std::string& error) {
  std::lock_guard<std::mutex> control(control_mu_);
  if (!running_.load()) return OK;
  stop_.store(true, std::memory_order_release);
  const Deadline deadline = deadline_after(timeout);
  while (!exited_.load(std::memory_order_acquire)) {
    if (Clock::now() > deadline) {
      error = "the engine thread did not stop within " + std::to_string(timeout) + " s";
      return TIMED_OUT;
    }
    std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
  thread_.join();
  running_.store(false, std::memory_order_release);
  for (auto& q : queues_) publish(*q);
  return OK;
}

void Engine::loop() {
  executor_->bind_thread();  // on failure the executor noted why; the copies it refuses then halt their queues
  uint64_t idle = 0;
  const uint64_t check = config_.stop_check_every;
  for (uint64_t spin = 0;; ++spin) {
    if (spin % check == 0 && stop_.load(std::memory_order_acquire)) break;
    if (command_pending_.load(std::memory_order_acquire)) serve_command();
    bool worked = false;
    for (uint32_t q : active_) worked |= poll(q);
    count(STAT_POLLS);
    if (worked) {
      idle = 0;
    } else if (config_.spin_before_sleep >= 0 && ++idle > static_cast<uint64_t>(config_.spin_before_sleep)) {
      std::this_thread::sleep_for(std::chrono::microseconds(config_.sleep_us));
    } else {
      cpu_relax();
    }
  }
  // Answer a command that arrived while stopping (the caller is waiting for it).
  if (command_pending_.load(std::memory_order_acquire)) serve_command();
  exited_.store(true, std::memory_order_release);
}

// --- the data path -----------------------------------------------------------------------------

bool Engine::poll(uint32_t qi) {
  Queue& q = *queues_[qi];
  bool worked = false;
  const uint32_t db = __atomic_load_n(q.doorbell, __ATOMIC_ACQUIRE);
  if (db != q.seen) {
    apply_doorbell(qi, db);
    worked = true;
  }
  if (q.enabled && !q.halted && (q.issued < q.posted || q.pending)) {
    drain(qi);
    worked = true;
  }
  if (executor_->inflight(qi)) executor_->progress(qi);
  return worked;
}

void Engine::apply_doorbell(uint32_t qi, uint32_t value) {
  Queue& q = *queues_[qi];
  q.seen = value;
  if (q.enabled && !q.halted && !q.pending) {
    const uint32_t delta = value - static_cast<uint32_t>(q.posted);
    if (delta >= (1u << (ARKDMA_DOORBELL_BITS - 1))) {
      q.pending = true;
      q.pending_code = ARKDMA_ERR_DOORBELL_BACKWARDS;
      q.pending_value = value;
    } else {
      const uint64_t target = q.posted + delta;
      if (target - q.completed > config_.slots) {
        // An asynchronous executor retires late: the producer may have seen completions the engine
        // has not counted yet. Let the in-flight work retire before calling it an overflow.
        executor_->retire_until(qi, target - config_.slots, deadline_after(OVERFLOW_SETTLE_SECONDS));
      }
      if (target - q.completed > config_.slots) {
        q.pending = true;
        q.pending_code = ARKDMA_ERR_RING_OVERFLOW;
        q.pending_value = value;
      } else {
        q.posted = target;
      }
    }
  }
  publish(q);
}

void Engine::drain(uint32_t qi) {
  Queue& q = *queues_[qi];
  const auto t0 = Clock::now();
  const uint64_t mask = config_.slots - 1;
  uint64_t issued = 0;
  while (q.issued < q.posted) {
    // A disable drops what has not started, and a stop leaves it posted: look between descriptors.
    if (command_pending_.load(std::memory_order_relaxed) || stop_.load(std::memory_order_relaxed)) break;
    Op op;
    op.index = q.issued;
    std::memcpy(&op.d, q.window + (q.issued & mask) * ARKDMA_DESCRIPTOR_BYTES, sizeof(op.d));
    const uint32_t code = validate(op.d, regions_, op.src, op.dst);
    if (code != ARKDMA_ERR_NONE) {
      halt(qi, code, op.d.cookie, static_cast<uint32_t>(op.index & DOORBELL_MASK), true);
      break;
    }
    if (!executor_->submit(qi, op)) {
      fail_bus(qi, op.index, op.d.cookie);
      break;
    }
    ++q.issued;
    ++issued;
    const bool dry = q.issued == q.posted && !q.pending;
    if (((op.d.flags & ARKDMA_FLAG_NOTIFY) || dry) && !write_completion(qi, completion_word(q.issued, false))) {
      fail_bus(qi, q.issued, 0);
      break;
    }
  }
  if (!q.halted && q.pending && q.issued == q.posted) halt(qi, q.pending_code, 0, q.pending_value, true);
  if (issued) {
    count(STAT_DRAINS);
    count(STAT_ISSUED, issued);
    count(STAT_DRAIN_NS, ns_since(t0));
  }
}

void Engine::halt(uint32_t qi, uint32_t code, uint32_t cookie, uint32_t index, bool write) {
  Queue& q = *queues_[qi];
  q.halted = true;
  q.pending = false;
  q.error = code;
  q.error_cookie = cookie;
  q.error_index = index;
  if (errlog_.size() < config_.errlog_depth) {
    errlog_.push_back(ErrorLogEntry{qi, code, cookie, index});
  } else {
    errlog_overflow_ = true;
  }
  // The word carries the index of the failing descriptor: everything issued before it.
  if (write) write_completion(qi, completion_word(q.issued, true));
  publish(q);
}

uint32_t Engine::completion_location_error(const Queue& q) const {
  return arkdma::completion_location_error(regions_, q.completion_region, q.completion_offset);
}

// False only when the executor could not write it (it noted why); a location that is not valid
// (the region was cleared, say) is skipped, as in the reference engine.
bool Engine::write_completion(uint32_t qi, uint64_t word) {
  Queue& q = *queues_[qi];
  if (completion_location_error(q) != ARKDMA_ERR_NONE) return true;
  if (q.written_valid && word == q.written) return true;
  const uint64_t addr = regions_[q.completion_region].addr + q.completion_offset;
  if (!executor_->completion(qi, addr, word)) return false;
  q.written = word;
  q.written_valid = true;
  count(STAT_COMPLETIONS);
  return true;
}

// The executor could not move data (BUS_ERROR): halt at the first descriptor that did not move.
void Engine::fail_bus(uint32_t qi, uint64_t index, uint32_t cookie) {
  Queue& q = *queues_[qi];
  const Failure f = executor_->take_failure(qi);
  uint64_t at = f.failed ? f.index : index;
  if (at > q.issued) at = q.issued;
  if (at < q.completed) at = q.completed;
  q.issued = at;
  halt(qi, ARKDMA_ERR_BUS_ERROR, f.failed ? f.cookie : cookie, static_cast<uint32_t>(at & DOORBELL_MASK), true);
}

void Engine::retire(uint32_t qi, uint64_t descriptors, uint64_t bytes) {
  queues_[qi]->completed += descriptors;
  descriptors_ += descriptors;
  bytes_ += bytes;
}

void Engine::publish(Queue& q) {
  q.seen_published.store(q.seen, std::memory_order_release);
  q.accepting.store(q.enabled && !q.halted && !q.pending, std::memory_order_release);
}

void Engine::rebuild_active() {
  active_.clear();
  for (uint32_t i = 0; i < queues_.size(); ++i) {
    if (queues_[i]->enabled) active_.push_back(i);
  }
}

bool Engine::queue_busy(uint32_t qi) {
  Queue& q = *queues_[qi];
  executor_->progress(qi);
  const bool work = q.enabled && !q.halted && (q.completed < q.posted || q.pending);
  return work || q.completed < q.issued || executor_->inflight(qi);
}

void Engine::clear_queue_state(Queue& q) {
  q.start = 0;
  q.completion_region = 0;
  q.completion_offset = 0;
  q.enabled = q.halted = q.pending = q.written_valid = false;
  q.error = q.error_cookie = q.error_index = 0;
  q.posted = q.issued = q.completed = 0;
  q.pending_code = q.pending_value = 0;
  q.written = 0;
  q.seen = 0;
}

// --- host control ------------------------------------------------------------------------------

void Engine::note_error(const std::string& message) {
  std::lock_guard<std::mutex> lock(note_mu_);
  note_ = message;
}

std::string Engine::take_note() {
  std::lock_guard<std::mutex> lock(note_mu_);
  std::string out = note_.empty() ? "no detail" : note_;
  note_.clear();
  return out;
}

int Engine::call(std::function<int()> fn, double timeout, std::string& error) {
  std::lock_guard<std::mutex> control(control_mu_);
  if (!running_.load(std::memory_order_acquire)) {
    if (!executor_->bind_thread()) {
      error = take_note();
      return DRIVER_FAILURE;
    }
    int status = fn();
    if (status != OK) error = take_note();
    return status;
  }
  auto cmd = std::make_shared<Command>();
  cmd->fn = std::move(fn);
  {
    std::lock_guard<std::mutex> lock(command_mu_);
    command_ = cmd;
    command_pending_.store(true, std::memory_order_release);
  }
  std::unique_lock<std::mutex> lock(command_mu_);
  const bool answered = command_cv_.wait_for(lock, std::chrono::duration<double>(timeout), [&] { return cmd->done; });
  if (!answered) {
    error = "the engine thread did not answer within " + std::to_string(timeout) +
            " s (a copy may be stuck); the engine is unusable, close it";
    return TIMED_OUT;
  }
  if (cmd->status != OK) error = take_note();
  return cmd->status;
}

void Engine::serve_command() {
  std::shared_ptr<Command> cmd;
  {
    std::lock_guard<std::mutex> lock(command_mu_);
    cmd = std::move(command_);
    command_pending_.store(false, std::memory_order_release);
  }
  if (!cmd) return;
  int status = cmd->fn();
  {
    std::lock_guard<std::mutex> lock(command_mu_);
    cmd->status = status;
    cmd->done = true;
  }
  command_cv_.notify_all();
}

int Engine::check_queue(uint32_t q, std::string& error) const {
  if (q >= queues_.size()) {
    error = "queue " + std::to_string(q) + " does not exist (0.." + std::to_string(queues_.size() - 1) + ")";
    return BAD_ARGUMENT;
  }
  return OK;
}

int Engine::set_region(uint32_t region, uint64_t addr, uint64_t size, uint32_t perms, double timeout,
                       std::string& error) {
  if (region >= config_.num_regions) {
    error = "region id " + std::to_string(region) + " is outside the table (0.." +
            std::to_string(config_.num_regions - 1) + ")";
    return BAD_ARGUMENT;
  }
  if (perms & ~(ARKDMA_PERM_READ | ARKDMA_PERM_WRITE)) {
    error = "region permissions must be READ (1), WRITE (2) or both, not " + std::to_string(perms);
    return BAD_ARGUMENT;
  }
  if (perms != 0 && size != 0 && addr + size < addr) {
    error = "region [addr, addr + size) wraps around the 64-bit address space";
    return BAD_ARGUMENT;
  }
  return call(
      [this, region, addr, size, perms]() -> int {
        if (perms != 0 && !executor_->check_region(addr, size)) return BAD_ARGUMENT;
        regions_[region] = perms ? Region{addr, size, perms} : Region{};
        return OK;
      },
      timeout, error);
}

int Engine::configure_queue(uint32_t qi, uint32_t region, uint64_t offset, uint64_t start, double timeout,
                            std::string& error) {
  if (int rc = check_queue(qi, error)) return rc;
  if (start > ARKDMA_COMPLETION_COUNT_MASK) {
    error = "start index must be below 2**63, not " + std::to_string(start);
    return BAD_ARGUMENT;
  }
  return call(
      [this, qi, region, offset, start]() -> int {
        Queue& q = *queues_[qi];
        q.completion_region = region;
        q.completion_offset = offset;
        q.start = start;
        return OK;
      },
      timeout, error);
}

int Engine::enable_queue(uint32_t qi, double timeout, std::string& error) {
  if (int rc = check_queue(qi, error)) return rc;
  return call(
      [this, qi, timeout]() -> int {
        Queue& q = *queues_[qi];
        if (q.enabled) return OK;
        q.enabled = true;
        q.halted = q.pending = q.written_valid = false;
        q.error = q.error_cookie = q.error_index = 0;
        q.posted = q.issued = q.completed = q.start;
        executor_->restart(qi, q.start);
        // Doorbells written while the queue was disabled are ignored: the doorbell restarts at START.
        q.seen = static_cast<uint32_t>(q.start & DOORBELL_MASK);
        __atomic_store_n(q.doorbell, q.seen, __ATOMIC_RELEASE);
        const uint32_t problem = completion_location_error(q);
        int status = OK;
        if (problem != ARKDMA_ERR_NONE) {
          halt(qi, problem, 0, q.seen, false);
        } else {
          if (!write_completion(qi, completion_word(q.start, false))) status = DRIVER_FAILURE;
          if (!executor_->drain(qi, deadline_after(timeout))) status = TIMED_OUT;
        }
        rebuild_active();
        publish(q);
        return status;
      },
      timeout, error);
}

int Engine::disable_queue(uint32_t qi, double timeout, std::string& error) {
  if (int rc = check_queue(qi, error)) return rc;
  return call(
      [this, qi, timeout]() -> int {
        Queue& q = *queues_[qi];
        if (!q.enabled) return OK;
        q.enabled = false;
        q.pending = false;
        const Deadline deadline = deadline_after(timeout);
        int status = OK;
        // Started descriptors finish; the rest (posted, never issued) are dropped.
        if (!executor_->drain(qi, deadline)) status = TIMED_OUT;
        if (!write_completion(qi, completion_word(q.completed, q.halted))) status = DRIVER_FAILURE;
        if (!executor_->drain(qi, deadline)) status = TIMED_OUT;
        rebuild_active();
        publish(q);
        if (status != OK) note_error("queue " + std::to_string(qi) + ": copies still in flight after the timeout");
        return status;
      },
      timeout, error);
}

int Engine::reset(double timeout, std::string& error) {
  return call(
      [this, timeout]() -> int {
        const Deadline deadline = deadline_after(timeout);
        int status = OK;
        for (uint32_t qi = 0; qi < queues_.size(); ++qi) {
          if (!executor_->drain(qi, deadline)) status = TIMED_OUT;
        }
        for (uint32_t qi = 0; qi < queues_.size(); ++qi) {
          clear_queue_state(*queues_[qi]);
          executor_->restart(qi, 0);
          publish(*queues_[qi]);
        }
        std::memset(queue_memory_.host, 0, queue_memory_.bytes);
        regions_.assign(config_.num_regions, Region{});
        errlog_.clear();
        errlog_overflow_ = false;
        descriptors_ = bytes_ = 0;
        rebuild_active();
        if (status != OK) note_error("copies still in flight after the timeout");
        return status;
      },
      timeout, error);
}

int Engine::queue_state(uint32_t qi, QueueStateOut& out, double timeout, std::string& error) {
  if (int rc = check_queue(qi, error)) return rc;
  auto result = std::make_shared<QueueStateOut>();
  int rc = call(
      [this, qi, result]() -> int {
        Queue& q = *queues_[qi];
        const bool busy = queue_busy(qi);
        *result = QueueStateOut{q.enabled, q.halted, busy, q.error, q.error_cookie, q.error_index,
                                completion_word(q.completed, q.halted)};
        return OK;
      },
      timeout, error);
  if (rc == OK) out = *result;
  return rc;
}

int Engine::pop_error_log(std::vector<ErrorLogEntry>& out, size_t max, double timeout, std::string& error) {
  auto entries = std::make_shared<std::vector<ErrorLogEntry>>();
  int rc = call(
      [this, entries, max]() -> int {
        const size_t n = std::min(max, errlog_.size());
        entries->assign(errlog_.begin(), errlog_.begin() + static_cast<std::ptrdiff_t>(n));
        errlog_.erase(errlog_.begin(), errlog_.begin() + static_cast<std::ptrdiff_t>(n));
        return OK;
      },
      timeout, error);
  if (rc == OK) out = *entries;
  return rc;
}

int Engine::errlog_overflow(bool& out, double timeout, std::string& error) {
  auto result = std::make_shared<bool>(false);
  int rc = call(
      [this, result]() -> int {
        *result = errlog_overflow_;
        return OK;
      },
      timeout, error);
  if (rc == OK) out = *result;
  return rc;
}

// STATUS.ERRLOG_OVERFLOW is write-1-to-clear: only this (and a reset) clears it, popping the log leaves it.
int Engine::clear_errlog_overflow(double timeout, std::string& error) {
  return call(
      [this]() -> int {
        errlog_overflow_ = false;
        return OK;
      },
      timeout, error);
}

int Engine::counters(uint64_t& descriptors, uint64_t& bytes, double timeout, std::string& error) {
  auto result = std::make_shared<std::pair<uint64_t, uint64_t>>();
  int rc = call(
      [this, result]() -> int {
        for (uint32_t qi : active_) executor_->progress(qi);
        *result = {descriptors_, bytes_};
        return OK;
      },
      timeout, error);
  if (rc == OK) {
    descriptors = result->first;
    bytes = result->second;
  }
  return rc;
}

int Engine::busy(bool& out, double timeout, std::string& error) {
  auto result = std::make_shared<bool>(false);
  int rc = call(
      [this, result]() -> int {
        bool any = false;
        for (uint32_t qi = 0; qi < queues_.size(); ++qi) {
          // A doorbell the thread has not read yet is work too.
          Queue& q = *queues_[qi];
          const bool unseen = q.enabled && __atomic_load_n(q.doorbell, __ATOMIC_ACQUIRE) != q.seen;
          any |= unseen || queue_busy(qi);
        }
        *result = any;
        return OK;
      },
      timeout, error);
  if (rc == OK) out = *result;
  return rc;
}

// --- producer side -----------------------------------------------------------------------------

int Engine::ring(uint32_t qi, uint32_t value, double timeout, std::string& error) {
  if (int rc = check_queue(qi, error)) return rc;
  Queue& q = *queues_[qi];
  __atomic_store_n(q.doorbell, value, __ATOMIC_RELEASE);
  const Deadline deadline = deadline_after(timeout);
  for (uint32_t spins = 0;; ++spins) {
    if (!running_.load(std::memory_order_acquire)) return OK;  // read when the thread starts
    if (!q.accepting.load(std::memory_order_acquire)) return OK;  // ignored, as the ABI says
    if (q.seen_published.load(std::memory_order_acquire) == value) return OK;
    if (spins > 256) {
      if (Clock::now() > deadline) {
        error = "queue " + std::to_string(qi) + ": the engine did not read doorbell " + std::to_string(value) +
                " within " + std::to_string(timeout) + " s; is the engine thread stuck?";
        return TIMED_OUT;
      }
      std::this_thread::yield();
    } else {
      cpu_relax();
    }
  }
}

int Engine::queue_pointers(uint32_t qi, uint64_t out[4], std::string& error) const {
  if (int rc = check_queue(qi, error)) return rc;
  const Queue& q = *queues_[qi];
  out[0] = reinterpret_cast<uint64_t>(q.window);
  out[1] = q.window_device;
  out[2] = reinterpret_cast<uint64_t>(q.doorbell);
  out[3] = q.doorbell_device;
  return OK;
}

void Engine::stats(uint64_t* out, int n) const {
  for (int i = 0; i < n && i < STAT_COUNT; ++i) out[i] = stats_[i].load(std::memory_order_relaxed);
}

}  // namespace arkdma
