// The checks every engine makes before a byte moves, in ErrorCode order (driver/reference_engine.py
// `validate` and `completion_location_error`, line for line).
#pragma once

#include <cstdint>
#include <vector>

#include "arkdma/abi.h"
#include "region.h"

namespace arkdma {

inline const Region* lookup_region(const std::vector<Region>& regions, uint32_t id) {
  if (id >= regions.size() || regions[id].perms == 0) return nullptr;
  return &regions[id];
}

// offset + length <= size, computed without overflow.
inline bool fits(uint64_t offset, uint64_t length, uint64_t size) {
  return length <= size && offset <= size - length;
}

// Returns ARKDMA_ERR_NONE and the resolved addresses, or the first failing check's code.
inline uint32_t validate(const arkdma_descriptor& d, const std::vector<Region>& regions, uint64_t& src_addr,
                         uint64_t& dst_addr) {
  if ((d.flags & ~ARKDMA_FLAGS_VALID) != 0 || d.reserved != 0) return ARKDMA_ERR_INVALID_DESCRIPTOR;
  const bool imm = (d.flags & ARKDMA_FLAG_IMM) != 0;
  if (imm && d.length != ARKDMA_IMM_BYTES) return ARKDMA_ERR_BAD_LENGTH;
  const Region* src = imm ? nullptr : lookup_region(regions, d.src_region);
  const Region* dst = lookup_region(regions, d.dst_region);
  if ((!imm && src == nullptr) || dst == nullptr) return ARKDMA_ERR_UNKNOWN_REGION;
  if ((src != nullptr && !(src->perms & ARKDMA_PERM_READ)) || !(dst->perms & ARKDMA_PERM_WRITE)) {
    return ARKDMA_ERR_PERMISSION;
  }
  // The bus address, not the offset: the value goes out as one aligned 8-byte write.
  if (imm && (dst->addr + d.dst_offset) % ARKDMA_IMM_BYTES != 0) return ARKDMA_ERR_MISALIGNED;
  if (src != nullptr && !fits(d.src_offset, d.length, src->size)) return ARKDMA_ERR_OUT_OF_BOUNDS;
  if (!fits(d.dst_offset, d.length, dst->size)) return ARKDMA_ERR_OUT_OF_BOUNDS;
  // Both ranges are inside their regions now, so these sums cannot overflow.
  if (src != nullptr && d.src_region == d.dst_region && d.length != 0 &&
      d.src_offset < d.dst_offset + d.length && d.dst_offset < d.src_offset + d.length) {
    return ARKDMA_ERR_OVERLAP;
  }
  src_addr = src != nullptr ? src->addr + d.src_offset : 0;
  dst_addr = dst->addr + d.dst_offset;
  return ARKDMA_ERR_NONE;
}

// Why a queue's completion word cannot live at (region, offset), or ARKDMA_ERR_NONE.
inline uint32_t completion_location_error(const std::vector<Region>& regions, uint32_t region, uint64_t offset) {
  const Region* r = lookup_region(regions, region);
  if (r == nullptr) return ARKDMA_ERR_UNKNOWN_REGION;
  if (!(r->perms & ARKDMA_PERM_WRITE)) return ARKDMA_ERR_PERMISSION;
  if ((r->addr + offset) % ARKDMA_COMPLETION_BYTES != 0) return ARKDMA_ERR_MISALIGNED;
  if (!fits(offset, ARKDMA_COMPLETION_BYTES, r->size)) return ARKDMA_ERR_OUT_OF_BOUNDS;
  return ARKDMA_ERR_NONE;
}

inline uint64_t completion_word(uint64_t completed, bool error) {
  return (completed & ARKDMA_COMPLETION_COUNT_MASK) | (error ? ARKDMA_COMPLETION_ERROR : 0);
}

}  // namespace arkdma
