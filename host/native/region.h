// A registered region as the software engine keeps it: what validation looks up.
#pragma once

#include <cstdint>

namespace arkdma {

struct Region {
  uint64_t addr = 0;
  uint64_t size = 0;
  uint32_t perms = 0;  // 0: not registered
};

}  // namespace arkdma
