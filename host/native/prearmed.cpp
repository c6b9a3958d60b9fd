// Pre-armed plans: rounds of fixed copies enqueued ahead on a plan's own stream, each behind
// cuStreamWaitValue32 on the GPU-written trigger word, then cuStreamWriteValue64 of the round into the
// done word. The engine thread only tops the stream up as rounds retire: it is never between a trigger
// and its copies.
#include "prearmed.h"

#include <random>
#include <thread>

namespace arkdma {

using namespace cuda;

PrearmedPlans::~PrearmedPlans() {
  for (auto& entry : plans_) release(entry.second, entry.second.armed > entry.second.completed);
  for (CUevent e : spare_events_) cu_->cuEventDestroy(e);
}

bool PrearmedPlans::ok(CUresult rc, const char* what) {
  if (rc == CUDA_SUCCESS) return true;
  engine_.note_error(cu_->describe(what, rc));
  return false;
}

int PrearmedPlans::open(uint32_t id, const std::vector<PlanCopy>& copies, uint32_t depth, PlanWords& out) {
  Plan p;
  p.copies = copies;
  p.depth = depth;
  std::random_device rd;
  p.key = (static_cast<uint64_t>(rd()) << 32 | rd()) | 1;
  if (!ok(cu_->cuMemAlloc(&p.words, WORDS_BYTES), "cuMemAlloc (plan words)")) return DRIVER_FAILURE;
  const uint64_t init[WORDS_BYTES / 8] = {0, 0, p.key, 0};
  if (!ok(cu_->cuMemcpyHtoD(p.words, init, sizeof(init)), "cuMemcpyHtoD (plan words)") ||
      !ok(cu_->cuStreamCreate(&p.stream, CU_STREAM_NON_BLOCKING), "cuStreamCreate (plan stream)")) {
    cu_->cuMemFree(p.words);
    return DRIVER_FAILURE;
  }
  out.trigger = p.words + TRIGGER;
  out.done = p.words + DONE;
  plans_.emplace(id, std::move(p));
  return OK;
}

int PrearmedPlans::arm(uint32_t id, uint64_t rounds) {
  Plan& p = plans_.at(id);
  if (p.failed) {
    engine_.note_error("pre-armed plan " + std::to_string(id) + " failed earlier and is stopped: close it");
    return DRIVER_FAILURE;
  }
  p.requested += rounds;
  retire(p);
  return arm_more(p) ? OK : DRIVER_FAILURE;
}

int PrearmedPlans::state(uint32_t id, PlanStateOut& out) {
  Plan& p = plans_.at(id);
  retire(p);
  out = PlanStateOut{p.requested, p.armed, p.completed, p.failed ? 1u : 0u};
  return OK;
}

CUevent PrearmedPlans::take_event() {
  if (!spare_events_.empty()) {
    CUevent e = spare_events_.back();
    spare_events_.pop_back();
    return e;
  }
  CUevent e = nullptr;
  return ok(cu_->cuEventCreate(&e, CU_EVENT_DISABLE_TIMING), "cuEventCreate (plan)") ? e : nullptr;
}

// Enqueues rounds until `requested` are armed or `depth` wait ahead of the last completed one.
bool PrearmedPlans::arm_more(Plan& p) {
  while (!p.failed && p.armed < p.requested && p.armed - p.completed < p.depth) {
    const uint64_t r = p.armed + 1;
    bool good = ok(cu_->cuStreamWaitValue32(p.stream, p.words + TRIGGER, static_cast<uint32_t>(r),
                                            CU_STREAM_WAIT_VALUE_GEQ), "cuStreamWaitValue32 (plan trigger)") &&
                ok(cu_->cuStreamWaitValue64(p.stream, p.words + GATE, p.key, CU_STREAM_WAIT_VALUE_EQ),
                   "cuStreamWaitValue64 (plan gate)");
    for (size_t i = 0; good && i < p.copies.size(); ++i) {
      const PlanCopy& c = p.copies[i];
      if (c.length) good = ok(cu_->cuMemcpyAsync(c.dst, c.src, c.length, p.stream), "cuMemcpyAsync (plan copy)");
    }
    good = good && ok(cu_->cuStreamWriteValue64(p.stream, p.words + DONE, r, CU_STREAM_WRITE_VALUE_DEFAULT),
                      "cuStreamWriteValue64 (plan done word)");
    CUevent e = good ? take_event() : nullptr;
    good = good && e != nullptr && ok(cu_->cuEventRecord(e, p.stream), "cuEventRecord (plan)");
    if (!good) {
      if (e) spare_events_.push_back(e);
      fail(p);
      return false;
    }
    p.rounds.push_back(Round{e, r});
    p.armed = r;
    engine_.count(STAT_COPIES, p.copies.size());
  }
  return true;
}

void PrearmedPlans::retire(Plan& p) {
  while (!p.rounds.empty()) {
    const CUresult rc = cu_->cuEventQuery(p.rounds.front().event);
    if (rc == CUDA_ERROR_NOT_READY) return;
    if (!ok(rc, "cuEventQuery (plan)")) {
      fail(p);
      return;
    }
    p.completed = p.rounds.front().round;
    spare_events_.push_back(p.rounds.front().event);
    p.rounds.pop_front();
  }
}

// A round was half enqueued, or the stream broke: fence off what is armed and tell the GPU through the
// done word's error bit (a round already running may still overwrite it; the GPU's wait then times out).
void PrearmedPlans::fail(Plan& p) {
  p.failed = true;
  const uint64_t fence = ~p.key;
  cu_->cuMemcpyHtoD(p.words + GATE, &fence, sizeof(fence));
  const uint64_t word = p.completed | ARKDMA_COMPLETION_ERROR;
  cu_->cuMemcpyHtoD(p.words + DONE, &word, sizeof(word));
}

// The highest round the GPU has triggered, as far as the armed ones go.
uint64_t PrearmedPlans::triggered(const Plan& p) {
  uint32_t word = 0;
  if (cu_->cuMemcpyDtoH(&word, p.words + TRIGGER, sizeof(word)) != CUDA_SUCCESS) return p.completed;
  const uint32_t ahead = word - static_cast<uint32_t>(p.completed);
  if (ahead >= (1u << 31)) return p.completed;
  return std::min(p.armed, p.completed + ahead);
}

int PrearmedPlans::close(uint32_t id, Deadline deadline, uint64_t& abandoned) {
  auto it = plans_.find(id);
  if (it == plans_.end()) return OK;
  Plan& p = it->second;
  retire(p);
  // Rounds the GPU has triggered get until the deadline to land; the others are fenced off at once.
  const uint64_t wanted = triggered(p);
  while (!p.failed && p.completed < wanted && Clock::now() < deadline) {
    std::this_thread::yield();
    retire(p);
  }
  abandoned = p.armed - p.completed;
  release(p, abandoned != 0);
  plans_.erase(it);
  return OK;
}

void PrearmedPlans::release(Plan& p, bool fenced) {
  if (fenced) {
    // Rounds still waiting cannot be dequeued: shut the gate for good and keep the words allocated (never
    // reused), so neither a late trigger nor recycled memory can start them. The stream goes on its own.
    if (!p.failed) {
      const uint64_t fence = ~p.key;
      cu_->cuMemcpyHtoD(p.words + GATE, &fence, sizeof(fence));
    }
    cu_->cuStreamDestroy(p.stream);
    for (const Round& r : p.rounds) cu_->cuEventDestroy(r.event);
    return;
  }
  for (const Round& r : p.rounds) spare_events_.push_back(r.event);
  cu_->cuStreamDestroy(p.stream);
  cu_->cuMemFree(p.words);
}

void PrearmedPlans::progress() {
  for (auto& entry : plans_) {
    Plan& p = entry.second;
    if (p.failed || (p.rounds.empty() && p.armed == p.requested)) continue;
    retire(p);
    arm_more(p);
  }
}

}  // namespace arkdma
