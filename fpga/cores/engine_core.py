"""EngineCore: the DMA engine on a board without PCIe: its BAR behind the UART bridge, its host memory on-chip RAM.

Bridge address map (32-bit words over the serial line, fpga/link/bridge_protocol.py):

    0x0000_0000 + a, a <  WINDOW_BASE   the engine's registers (its AXI4-Lite BAR port)
    0x0000_0000 + a, a <  BAR bytes     the submission windows (its AXI4 window port, 32-bit writes)
    0x8000_0000 + b, b <  ram_bytes     on-chip RAM, which the engine sees as host memory at bus address b
    anything else                       DECERR

The engine's ports are found by what they are (an AXI4-Lite slave, an AXI4 slave, an AXI4 master),
not by name, so the core follows the engine as it grows.
"""

from __future__ import annotations

from amaranth import Const, Module, Mux, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import Flow, In, Out

from driver.abi import WINDOW_BASE, Resp
from fpga.cores.axi_ram import AxiRam
from fpga.cores.evn_top import STATUS_LEDS
from fpga.cores.uart_bridge import UARTBridge
from rtl.axi import axi_signature
from rtl.register_bus import BusToAxi, RegisterBusSignature

RAM_BASE = 0x8000_0000
DEFAULT_RAM_BYTES = 64 * 1024
BUS_TIMEOUT_CYCLES = 1 << 16  # a BAR access the engine leaves unanswered this long reads DECERR


class EnginePortError(TypeError):
    """The engine's signature lacks a port the board core needs."""


def _is_axi_port(member) -> bool:
    return member.is_signature and {"awvalid", "wvalid", "arvalid", "rready"} <= set(member.signature.members)


def find_ports(engine: wiring.Component) -> dict[str, str]:
    """Names of the engine's BAR port (AXI4-Lite slave), window port (AXI4 slave) and memory port (AXI4 master)."""
    found: dict[str, list[str]] = {"bar": [], "window": [], "memory": []}
    for name, member in engine.signature.members.items():
        if not _is_axi_port(member):
            continue
        full = "awlen" in member.signature.members
        if member.flow == Flow.In:
            found["window" if full else "bar"].append(name)
        elif full:
            found["memory"].append(name)
    wrong = {kind: names for kind, names in found.items() if len(names) != 1}
    if wrong:
        raise EnginePortError(f"the engine should have exactly one AXI4-Lite slave (BAR), one AXI4 slave (window) "
                              f"and one AXI4 master (memory) port; found {found}")
    return {kind: names[0] for kind, names in found.items()}


def _width(port, member: str) -> int:
    return len(getattr(port, member))


class EngineOnBus(wiring.Component):
    """The engine reached through one register bus by the address map above: what a bring-up bridge (UART)
    or a PCIe completer puts in front of it. Its host memory is on-chip RAM, or with `ram_bytes` None its
    AXI4 master port `mem` (a PCIe requester behind it). With `window_port` the windows' write channels are also
    reached directly (`win`, AXI4 at the engine's width; its reads stay on the bus): they take `win` while a burst
    of it is in flight, the bus's writes otherwise. Its master never writes the windows both ways at once."""

    def __init__(self, params, ram_bytes: int | None = DEFAULT_RAM_BYTES, window_port: bool = False):
        from rtl.params import ADDR_WIDTH

        self.params, self.ram_bytes, self.window_port = params, ram_bytes, window_port
        members = {"bus": In(RegisterBusSignature()), "status": Out(STATUS_LEDS)}
        if ram_bytes is None:
            members["mem"] = Out(axi_signature(ADDR_WIDTH, params.data_width, params.read_id_width))
            members["max_payload"] = In(3)  # the engine's (rtl/engine.py): the PCIe link's size behind `mem`
        if window_port:
            members["win"] = In(axi_signature(params.bar_addr_width, params.data_width, params.window_id_width))
        super().__init__(members)

    def elaborate(self, platform):
        from rtl.engine import Engine

        m = Module()
        p = self.params
        m.submodules.engine = engine = Engine(p)
        ports = find_ports(engine)
        bar, window, memory = (getattr(engine, ports[k]) for k in ("bar", "window", "memory"))
        m.submodules.to_bar = to_bar = BusToAxi(_width(bar, "awaddr"), _width(bar, "wdata"), None,
                                                BUS_TIMEOUT_CYCLES)
        m.submodules.to_window = to_window = BusToAxi(_width(window, "awaddr"), _width(window, "wdata"),
                                                      _width(window, "awid"), BUS_TIMEOUT_CYCLES)
        wiring.connect(m, to_bar.axi, bar)
        if self.window_port:
            _share_writes(m, self.win, to_window.axi, window)
        else:
            wiring.connect(m, to_window.axi, window)

        # decode the bus's accesses onto the targets; an address nothing backs answers DECERR
        bus = self.bus
        targets = {
            "bar": (to_bar.bus, bus.addr < WINDOW_BASE, bus.addr),
            "window": (to_window.bus, (bus.addr >= WINDOW_BASE) & (bus.addr < p.bar_bytes), bus.addr),
        }
        if self.ram_bytes is None:
            wiring.connect(m, memory, wiring.flipped(self.mem))
            m.d.comb += engine.max_payload.eq(self.max_payload)
        else:
            m.submodules.ram = ram = AxiRam(self.ram_bytes, _width(memory, "wdata"), _width(memory, "awaddr"),
                                            _width(memory, "awid"))
            wiring.connect(m, memory, ram.axi)
            targets["ram"] = (ram.side, bus.addr >= RAM_BASE, bus.addr - RAM_BASE)
        nowhere = Signal()
        in_ram = bus.addr >= RAM_BASE if self.ram_bytes is not None else Const(0)
        m.d.comb += nowhere.eq(~(bus.addr < p.bar_bytes) & ~in_ram)
        for target, selected, addr in targets.values():
            m.d.comb += [target.addr.eq(addr), target.wdata.eq(bus.wdata), target.strb.eq(bus.strb),
                         target.write.eq(bus.write), target.valid.eq(bus.valid & selected)]
            with m.If(selected):
                m.d.comb += [bus.ready.eq(target.ready), bus.rdata.eq(target.rdata), bus.resp.eq(target.resp)]
        nowhere_ready = Signal()
        m.d.sync += nowhere_ready.eq(bus.valid & nowhere & ~nowhere_ready)
        with m.If(nowhere):
            m.d.comb += [bus.ready.eq(nowhere_ready), bus.resp.eq(Resp.DECERR)]

        # LEDs: each toggles on an event, so activity shows as blinking; the last one latches a bus error
        toggles = [bus.valid & bus.ready, memory.arvalid & memory.arready, memory.awvalid & memory.awready]
        leds = Signal(STATUS_LEDS)
        for i, event in enumerate(toggles):
            with m.If(event):
                m.d.sync += leds[i].eq(~leds[i])
        with m.If((memory.bvalid & (memory.bresp != Resp.OKAY)) | (memory.rvalid & (memory.rresp != Resp.OKAY))):
            m.d.sync += leds[STATUS_LEDS - 1].eq(1)
        m.d.comb += self.status.eq(leds)
        return m


WINDOW_BURSTS = 15  # direct window bursts in flight that the sharing below counts


def _share_writes(m: Module, direct, bridged, port) -> None:
    """`port` (an AXI4 slave) written by `direct` while one of its bursts is in flight (AW waiting or taken, write
    response not back), else by `bridged`, which also has the read channels."""
    out = Signal(range(WINDOW_BURSTS + 1))
    owns = Signal()
    m.d.comb += owns.eq(direct.awvalid | (out != 0))
    m.d.sync += out.eq(out + (direct.awvalid & port.awready) - (direct.bvalid & direct.bready))
    for name, member in port.signature.flip().members.items():  # as the master sees them
        master_drives = member.flow == Out
        if name.startswith(("ar", "r")):  # reads: the bridge's; the direct port has none
            if master_drives:
                m.d.comb += getattr(port, name).eq(getattr(bridged, name))
            else:
                m.d.comb += [getattr(bridged, name).eq(getattr(port, name)), getattr(direct, name).eq(0)]
        elif master_drives:  # AW, W and bready: from whichever owns the port now
            m.d.comb += getattr(port, name).eq(Mux(owns, getattr(direct, name), getattr(bridged, name)))
        elif name in ("awready", "wready", "bvalid"):  # handshakes: to the owner only
            m.d.comb += [getattr(direct, name).eq(getattr(port, name) & owns),
                         getattr(bridged, name).eq(getattr(port, name) & ~owns)]
        else:
            m.d.comb += [getattr(direct, name).eq(getattr(port, name)), getattr(bridged, name).eq(getattr(port, name))]


class EngineCore(wiring.Component):
    """The board core: the UART bridge in front of EngineOnBus."""

    def __init__(self, params, clock_mhz: float, baud: int = 115200, ram_bytes: int = DEFAULT_RAM_BYTES):
        self.params, self.ram_bytes = params, ram_bytes
        self.divisor = round(clock_mhz * 1e6 / baud)
        super().__init__({"rx": In(1, init=1), "tx": Out(1, init=1), "status": Out(STATUS_LEDS)})

    def elaborate(self, platform):
        m = Module()
        m.submodules.bridge = bridge = UARTBridge(self.divisor, frame_timeout=100 * self.divisor)
        m.submodules.engine_on_bus = core = EngineOnBus(self.params, self.ram_bytes)
        m.d.comb += [bridge.rx.eq(self.rx), self.tx.eq(bridge.tx), self.status.eq(core.status)]
        wiring.connect(m, bridge.bus, core.bus)
        return m
