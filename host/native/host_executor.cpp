// The host executor: moves bytes with memcpy on the engine thread, so every descriptor has
// completed when submit() returns. Regions are host memory; bus addresses are host pointers.
#include <cstdlib>
#include <cstring>

#include "engine.h"

namespace arkdma {

namespace {

constexpr size_t ALIGN = 4096;

class HostExecutor final : public Executor {
 public:
  using Executor::Executor;

  // "device" is a wish the host executor answers with host memory (engine.py asks for host only).
  bool alloc(size_t bytes, Placement, PinnedMemory& out) override {
    const size_t rounded = (bytes + ALIGN - 1) / ALIGN * ALIGN;
    void* p = std::aligned_alloc(ALIGN, rounded ? rounded : ALIGN);
    if (p == nullptr) {
      engine_.note_error("out of host memory allocating " + std::to_string(bytes) + " bytes");
      return false;
    }
    out = PinnedMemory{static_cast<uint8_t*>(p), 0, bytes};
    return true;
  }

  void free(PinnedMemory& mem, Placement) override {
    std::free(mem.host);
    mem = PinnedMemory{};
  }

  bool read_device(uint64_t, void*, size_t) override { return no_device_memory(); }

  bool write_device(uint64_t, const void*, size_t) override { return no_device_memory(); }

  bool submit(uint32_t q, const Op& op) override {
    if (op.d.flags & ARKDMA_FLAG_IMM) {
      store64(op.dst, op.d.src_offset);
      engine_.count(STAT_COPIES);
      engine_.retire(q, 1, ARKDMA_IMM_BYTES);
      return true;
    }
    if (op.d.length) std::memcpy(reinterpret_cast<void*>(op.dst), reinterpret_cast<const void*>(op.src), op.d.length);
    engine_.count(STAT_COPIES);
    engine_.retire(q, 1, op.d.length);
    return true;
  }

  bool completion(uint32_t, uint64_t addr, uint64_t word) override {
    store64(addr, word);
    return true;
  }

 private:
  bool no_device_memory() {
    engine_.note_error("the host executor has no GPU memory");
    return false;
  }

  // One 8-byte store when aligned (what a poller on another thread expects), bytes otherwise.
  static void store64(uint64_t addr, uint64_t value) {
    if (addr % 8 == 0) {
      __atomic_store_n(reinterpret_cast<uint64_t*>(addr), value, __ATOMIC_RELEASE);
    } else {
      __atomic_thread_fence(__ATOMIC_RELEASE);
      std::memcpy(reinterpret_cast<void*>(addr), &value, sizeof(value));
    }
  }
};

}  // namespace

std::unique_ptr<Executor> make_host_executor(Engine& engine) { return std::make_unique<HostExecutor>(engine); }

}  // namespace arkdma
