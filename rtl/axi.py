"""AXI4 and AXI4-Lite port signatures (master's view), with the signal names bus models expect.

Members are flat (`awaddr`, `wvalid`, ...) rather than nested streams so the Verilog ports read
`<port>__awaddr`: cocotbext-axi and vendor IP find them by prefix. Inside the engine, channels
are handled as these plain signals.
"""

from __future__ import annotations

from enum import IntEnum

from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out


class Burst(IntEnum):
    FIXED = 0
    INCR = 1
    WRAP = 2


def axi_signature(addr_width: int, data_width: int, id_width: int) -> wiring.Signature:
    """Full AXI4 (no user, region or QoS signals), as seen by the master."""
    strb = data_width // 8
    return wiring.Signature({
        "awid": Out(id_width), "awaddr": Out(addr_width), "awlen": Out(8), "awsize": Out(3),
        "awburst": Out(2), "awlock": Out(1), "awcache": Out(4), "awprot": Out(3),
        "awvalid": Out(1), "awready": In(1),
        "wdata": Out(data_width), "wstrb": Out(strb), "wlast": Out(1), "wvalid": Out(1), "wready": In(1),
        "bid": In(id_width), "bresp": In(2), "bvalid": In(1), "bready": Out(1),
        "arid": Out(id_width), "araddr": Out(addr_width), "arlen": Out(8), "arsize": Out(3),
        "arburst": Out(2), "arlock": Out(1), "arcache": Out(4), "arprot": Out(3),
        "arvalid": Out(1), "arready": In(1),
        "rid": In(id_width), "rdata": In(data_width), "rresp": In(2), "rlast": In(1), "rvalid": In(1),
        "rready": Out(1),
    })


CHANNELS = ("aw", "w", "b", "ar", "r")


def axi_channels(addr_width: int, data_width: int, id_width: int, *channels: str) -> wiring.Signature:
    """The members of some AXI4 channels (master's view, same names as `axi_signature`), for a block that
    owns only part of the master port: the read engine its AR channel, the read tracker R, the write mux
    AW, W and B. `join` wires such a part into the whole port."""
    unknown = set(channels) - set(CHANNELS)
    if unknown or not channels:
        raise ValueError(f"AXI channels are {', '.join(CHANNELS)}; got {channels!r}")
    whole = axi_signature(addr_width, data_width, id_width).members
    return wiring.Signature({name: member for name, member in whole.items() if _channel_of(name) in channels})


def _channel_of(name: str) -> str:
    return next(c for c in ("aw", "ar", "w", "b", "r") if name.startswith(c))


def join(m, part, whole) -> None:
    """Wire `part` (a master's view of some channels, from `axi_channels`) to the same-named members of
    `whole` (the master port it belongs to, seen from inside the master)."""
    for name, member in part.signature.members.items():
        mine, theirs = getattr(part, name), getattr(whole, name)
        if member.flow == wiring.Out:
            m.d.comb += theirs.eq(mine)
        else:
            m.d.comb += mine.eq(theirs)


def axi_lite_signature(addr_width: int, data_width: int = 32) -> wiring.Signature:
    """AXI4-Lite, as seen by the master."""
    return wiring.Signature({
        "awaddr": Out(addr_width), "awprot": Out(3), "awvalid": Out(1), "awready": In(1),
        "wdata": Out(data_width), "wstrb": Out(data_width // 8), "wvalid": Out(1), "wready": In(1),
        "bresp": In(2), "bvalid": In(1), "bready": Out(1),
        "araddr": Out(addr_width), "arprot": Out(3), "arvalid": Out(1), "arready": In(1),
        "rdata": In(data_width), "rresp": In(2), "rvalid": In(1), "rready": Out(1),
    })


def size_code(data_width: int) -> int:
    """AxSIZE for full-width beats."""
    return (data_width // 8 - 1).bit_length()
