"""The UltraScale+ PCIe block's four AXI streams at the interface widths the front end speaks (256 and 512 bits,
DWORD-aligned): their user-field widths and the places of the fields the front end reads or drives (PG213).

At 256 bits a TLP starts at lane 0 of a beat and `tkeep`/`tlast` frame it. At 512 bits the block also marks
packet starts and ends in `tuser` (is_sop, is_sop_ptr, is_eop, is_eop_ptr), which it reads instead of
`tkeep`/`tlast` where a stream straddles (two TLPs a beat, the second from lane 8); the front end drives them
on every 512-bit stream it sources."""

from __future__ import annotations

from dataclasses import dataclass

from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out


@dataclass(frozen=True)
class StreamLayout:
    width: int
    cq_user_bits: int
    cc_user_bits: int
    rq_user_bits: int
    rc_user_bits: int
    cq_last_be: int  # CQ tuser: first_be [3:0], last_be from here
    rq_last_be: int  # RQ tuser: first_be [3:0] (and the second TLP's [7:4] at 512), last_be from here
    rc_sop: int  # RC tuser: is_sop (bit 0 of is_sop at 512)

    @property
    def dwords(self) -> int:
        return self.width // 32

    @property
    def size_bits(self) -> int:
        """AXI4 AxSIZE of a whole beat."""
        return (self.width // 8 - 1).bit_length()


LAYOUTS = {
    256: StreamLayout(256, cq_user_bits=88, cc_user_bits=33, rq_user_bits=62, rc_user_bits=75,
                      cq_last_be=4, rq_last_be=4, rc_sop=32),
    512: StreamLayout(512, cq_user_bits=183, cc_user_bits=81, rq_user_bits=137, rc_user_bits=161,
                      cq_last_be=8, rq_last_be=8, rc_sop=64),
}
WIDTHS = tuple(LAYOUTS)

# 512-bit side-band fields (bit offsets in tuser)
RQ512_IS_SOP, RQ512_SOP_PTR, RQ512_IS_EOP, RQ512_EOP_PTR = 20, 22, 26, 28  # 2 x 1, 2 x 2, 2 x 1, 2 x 4 bits
RC512_IS_SOP, RC512_SOP_PTR, RC512_IS_EOP, RC512_EOP_PTR = 64, 68, 76, 80  # 4 x 1, 4 x 2, 4 x 1, 4 x 4 bits
CC512_IS_SOP, CC512_IS_EOP, CC512_EOP_PTR = 0, 6, 8


def layout(width: int) -> StreamLayout:
    if width not in LAYOUTS:
        raise ValueError(f"the PCIe front end speaks {' or '.join(map(str, WIDTHS))}-bit streams, not {width}-bit")
    return LAYOUTS[width]


def axis_signature(data_bits: int, user_bits: int) -> wiring.Signature:
    """An AXI stream of the PCIe block, from its source's side."""
    return wiring.Signature({"tdata": Out(data_bits), "tkeep": Out(data_bits // 32), "tlast": Out(1),
                             "tuser": Out(user_bits), "tvalid": Out(1), "tready": In(1)})
