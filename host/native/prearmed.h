// Pre-armed plans for the CUDA executor: each plan owns a stream on which rounds of fixed copies wait,
// enqueued ahead of time, for a trigger word the GPU writes; see Executor::plan_open in engine.h.
#pragma once

#include <cstdint>
#include <deque>
#include <map>
#include <vector>

#include "cuda_driver.h"
#include "engine.h"

namespace arkdma {

class PrearmedPlans {
 public:
  PrearmedPlans(Engine& engine, const cuda::Driver* cu) : engine_(engine), cu_(cu) {}
  ~PrearmedPlans();
  PrearmedPlans(const PrearmedPlans&) = delete;
  PrearmedPlans& operator=(const PrearmedPlans&) = delete;

  int open(uint32_t id, const std::vector<PlanCopy>& copies, uint32_t depth, PlanWords& out);
  int arm(uint32_t id, uint64_t rounds);
  int state(uint32_t id, PlanStateOut& out);
  int close(uint32_t id, Deadline deadline, uint64_t& abandoned);
  void progress();

 private:
  // The plan's words in GPU memory: the trigger at +0 (u32, GPU-written), the done word at +8 (u64,
  // engine-written; bit 63 set when the plan failed) and the gate at +16 (u64). Every round waits for
  // the gate to hold the plan's random key after its trigger, so changing the gate fences off for good
  // the rounds that have not started.
  static constexpr uint64_t TRIGGER = 0, DONE = 8, GATE = 16, WORDS_BYTES = 32;

  struct Round {
    cuda::CUevent event;
    uint64_t round;
  };

  struct Plan {
    std::vector<PlanCopy> copies;
    uint32_t depth = 0;
    cuda::CUstream stream = nullptr;
    cuda::CUdeviceptr words = 0;
    uint64_t key = 0;
    uint64_t requested = 0, armed = 0, completed = 0;
    bool failed = false;
    std::deque<Round> rounds;  // armed, not yet seen completed
  };

  bool ok(cuda::CUresult rc, const char* what);
  bool arm_more(Plan& p);
  void retire(Plan& p);
  uint64_t triggered(const Plan& p);
  void fail(Plan& p);
  void release(Plan& p, bool fenced);
  cuda::CUevent take_event();

  Engine& engine_;
  const cuda::Driver* cu_;
  std::map<uint32_t, Plan> plans_;
  std::vector<cuda::CUevent> spare_events_;
};

}  // namespace arkdma
