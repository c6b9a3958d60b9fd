"""The card: the engine behind the UltraScale+ PCIe block's AXI streams (PcieCard, shared with the simulation in
sim/card.py), and the board top that puts it on a real block (CardTop): the pcie4_uscale_plus IP, its reference
clock through IBUFDS_GTE4, PERST#, the lanes, and status LEDs.

    PCIe lanes ── pcie4_uscale_plus ── CQ ─> PcieCompleter ─ register bus ─> EngineOnBus (BAR0: registers, windows)
                  (user_clk 250 MHz)   CC <─┘   └─ window writes, 256-bit AXI4 ─>┘  │ AXI4 master
                                       RQ <─ PcieRequester <────────────────────┘
                                       RC ─>┘
"""

from __future__ import annotations

from amaranth import ClockDomain, Const, Module, Signal
from amaranth.hdl import Instance
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from fpga.boards.spec import PcieBoard
from fpga.cores.pcie4_ip import IP_MODULE
from rtl.params import EngineParams
from rtl.pcie_completer import WIDTH, PcieCompleter, WindowPort
from rtl.pcie_requester import COMPLETION_TIMEOUT_CYCLES, SIZE_CODE_BITS, PcieRequester
from rtl.pcie_requests import REQUESTER_DATA_WIDTHS
from rtl.pcie_streams import axis_signature, layout

USER_CLOCK_MHZ = 250.0  # the block's user clock at Gen3 x8 with a 256-bit interface
HEARTBEAT_BIT = 28  # LED 0 toggles every 2**28 system-clock cycles: about 1 Hz at 300 MHz
ACTIVITY_CYCLES = 1 << 22  # LED 2 stays lit this long after a BAR access or a DMA request: ~17 ms at 250 MHz
TOP_NAME = "arkdma_card_top"
CARD_DATA_WIDTH = 256  # the block's interface: the requester moves a whole beat a cycle each way
# a host round trip of ~2 us at gen3x8's 6.6 GB/s wants ~13 KiB in flight, and a small descriptor is a read of its
# own: 128 reads (the requester's tag pool) keep 256-byte copies streaming (one every ~12 cycles over a ~450-cycle
# round trip) and 64-byte ones near the link's pace. Read bursts are a page long (at most AXI4's 256 beats), so the
# requester cuts them at whatever Max_Read_Request_Size the host set: each request takes RQ a half beat at 512 bits,
# and at MRRS 1 KiB or more a 1 KiB copy's read is one request where 512-byte bursts made it two (docs/hardware-
# engine.md has the rates). At MRRS 512 the requests are the same as with 512-byte bursts.
CARD_BURST_BYTES = 4096
# write bursts are the host's max payload size long (128 bytes at least) from a copy's start, cut at 4 KiB: each
# is one memory write, and a burst waits for no more completions than one write carries before it goes out: on a
# link whose writes take the RQ stream as long as their completions take RC, that wait is a latency term no later
# burst can catch up
CARD_WRITE_BURST_BYTES = 128
CARD_READS_OUTSTANDING = 128
CARD_BUFFER_BYTES = 32768  # the block's completion receive buffer: no more read data may be in flight
SMALL_CARD_READS_OUTSTANDING = 32  # the 64- and 128-bit cards, which move far less


def card_params(**given) -> EngineParams:
    """The card's engine: 256-bit by default (`data_width=64`: a 64-bit engine sized like the board's; 512: the
    engine of the 512-bit card, for Gen3 x16 and Gen4 x8), 4 KiB read bursts (2 KiB at 64 and 128 bits: AXI4's 256
    beats), write bursts the host's max payload size long from each copy's start, 128 reads in flight (32 at the
    narrower widths), 32 KiB of buffer (8 KiB at 64 bits); any EngineParams field in `given` overrides.

    The buffer also bounds the read data in flight (a row is held from its read request to its write), and so
    the completions the block must hold: its receive buffer for completions is 32 KiB (CPLD credits; the block
    model drops what does not fit, and a read that loses a completion times out). So no width gets more."""
    width = given.get("data_width", CARD_DATA_WIDTH)
    if width not in REQUESTER_DATA_WIDTHS:
        raise ValueError(f"the card's PCIe requester packs {', '.join(map(str, REQUESTER_DATA_WIDTHS))}-bit engine "
                         f"beats into the block's 256- or 512-bit beats, not {width}-bit ones")
    reads = CARD_READS_OUTSTANDING if width >= CARD_DATA_WIDTH else SMALL_CARD_READS_OUTSTANDING
    buffer = 8192 if width == 64 else CARD_BUFFER_BYTES
    defaults = dict(data_width=width, reads_outstanding=reads, max_burst_beats=min(256, CARD_BURST_BYTES * 8 // width),
                    write_burst_bytes=CARD_WRITE_BURST_BYTES, buffer_bytes=buffer, fall_through=True)
    return EngineParams(**{**defaults, **given})


def interface_width(params: EngineParams) -> int:
    """The width of the block's streams the card is built for: 512 bits for the 512-bit engine (Gen3 x16, Gen4
    x8; its RQ and RC straddled, two requests or completions a beat), else 256 (the requester packs narrower
    engine beats into them)."""
    return 512 if params.data_width == 512 else WIDTH


def bar0_bytes(params: EngineParams) -> int:
    """BAR0: the engine's registers and windows, rounded up to a power of two."""
    return 1 << (params.bar_bytes - 1).bit_length()


class PcieCard(wiring.Component):
    """The engine between the PCIe block's completer streams (CQ/CC: BAR0) and requester streams (RQ/RC: its
    memory port), in the `sync` domain at the block's user clock. `cfg_max_read_req` and `cfg_max_payload` are the
    block's outputs of the same names: the Max_Read_Request_Size and Max_Payload_Size the host set, which the
    requester cuts its reads and writes to."""

    def __init__(self, params: EngineParams, completion_timeout_cycles: int = COMPLETION_TIMEOUT_CYCLES):
        self.params, self.completion_timeout_cycles = params, completion_timeout_cycles
        self.width = width = interface_width(params)
        lay = layout(width)
        super().__init__({
            "cq": In(axis_signature(width, lay.cq_user_bits)),
            "cc": Out(axis_signature(width, lay.cc_user_bits)),
            "rq": Out(axis_signature(width, lay.rq_user_bits)),
            "rc": In(axis_signature(width, lay.rc_user_bits)),
            "cfg_max_read_req": In(SIZE_CODE_BITS),
            "cfg_max_payload": In(SIZE_CODE_BITS),
        })

    def elaborate(self, platform):
        from fpga.cores.engine_core import EngineOnBus

        p = self.params
        m = Module()
        from driver.abi import WINDOW_BASE

        # an engine as wide as the streams takes window writes a CQ beat a cycle, past the register bus
        # (rtl/pcie_completer.py)
        direct = p.data_width == self.width
        window = (WindowPort(WINDOW_BASE, p.bar_bytes, p.bar_addr_width, p.window_id_width, self.width)
                  if direct else None)
        m.submodules.completer = completer = PcieCompleter(window, self.width)
        m.submodules.engine_on_bus = core = EngineOnBus(p, ram_bytes=None, window_port=direct)
        m.submodules.requester = requester = PcieRequester(id_width=p.read_id_width, data_width=p.data_width,
                                                           max_burst_beats=p.max_burst_beats,
                                                           completion_timeout_cycles=self.completion_timeout_cycles,
                                                           width=self.width, rq_straddle=self.width == 512,
                                                           rc_straddle=self.width == 512)
        wiring.connect(m, wiring.flipped(self.cq), completer.cq)
        wiring.connect(m, completer.cc, wiring.flipped(self.cc))
        wiring.connect(m, completer.bus, core.bus)
        if direct:
            wiring.connect(m, completer.win, core.win)
        wiring.connect(m, core.mem, requester.mem)
        wiring.connect(m, requester.rq, wiring.flipped(self.rq))
        wiring.connect(m, wiring.flipped(self.rc), requester.rc)
        m.d.comb += [requester.max_read_req.eq(self.cfg_max_read_req), requester.max_payload.eq(self.cfg_max_payload),
                     core.max_payload.eq(self.cfg_max_payload)]
        return m


# The top's ports, by the names the board's pin table must have.
TOP_PORTS = ("pcie_refclk_p", "pcie_refclk_n", "pcie_perst_n", "pcie_rx_p", "pcie_rx_n", "pcie_tx_p", "pcie_tx_n",
             "sysclk_p", "sysclk_n", "led")
LEDS = 3  # 0: heartbeat of the system clock (configured, clock runs), 1: PCIe link up, 2: BAR access or DMA


def top_ports(board: PcieBoard) -> dict:
    """CardTop's signature members on `board`; a board without one of TOP_PORTS, or too few LEDs or lane pins,
    is refused."""
    members = {}
    for name in TOP_PORTS:
        port = board.port(name)
        members[name] = (In if port.direction == "input" else Out)(port.width)
    if board.port("led").width < LEDS:
        raise ValueError(f"{board.name} has {board.port('led').width} LEDs; the card top drives {LEDS}")
    if board.port("pcie_rx_p").width != board.pcie_lanes:
        raise ValueError(f"{board.name}: {board.port('pcie_rx_p').width} rx pins for {board.pcie_lanes} lanes")
    return members


class CardTop(wiring.Component):
    """The board's top level: every port is a pin of `board` (fpga/boards/), the card runs on the IP's user clock
    and is held in reset while the IP's user_reset is high (PERST#, link down)."""

    def __init__(self, params: EngineParams, board: PcieBoard):
        if interface_width(params) != WIDTH:
            raise ValueError(f"the board's PCIe IP is set up for {WIDTH}-bit streams (Gen3 x8); a "
                             f"{params.data_width}-bit engine needs the {interface_width(params)}-bit interface, "
                             "which only the simulation has")
        self.params, self.board = params, board
        super().__init__(top_ports(board))

    def elaborate(self, platform):
        m = Module()
        m.domains.sync = sync = ClockDomain("sync")
        m.domains.sys = sys = ClockDomain("sys", reset_less=True)
        m.submodules.card = card = PcieCard(self.params)

        refclk_gt, refclk = Signal(name="refclk_gt"), Signal(name="refclk")
        m.submodules.refclk_buf = Instance(
            "IBUFDS_GTE4", p_REFCLK_HROW_CK_SEL=Const(0b00, 2),  # ODIV2 = O: the IP's sys_clk is 100 MHz too
            i_I=self.pcie_refclk_p, i_IB=self.pcie_refclk_n, i_CEB=Const(0, 1), o_O=refclk_gt, o_ODIV2=refclk)

        user_clk, user_reset, link_up = Signal(name="user_clk"), Signal(name="user_reset"), Signal(name="link_up")
        cc_ready, rq_ready = Signal(4, name="cc_ready"), Signal(4, name="rq_ready")
        flr_in_process, flr_seen = Signal(4, name="flr_in_process"), Signal(4, name="flr_seen")
        max_read_req, max_payload = Signal(3, name="cfg_max_read_req"), Signal(2, name="cfg_max_payload")
        m.submodules.pcie = Instance(
            IP_MODULE,
            i_sys_clk=refclk, i_sys_clk_gt=refclk_gt, i_sys_reset=self.pcie_perst_n,
            i_pci_exp_rxp=self.pcie_rx_p, i_pci_exp_rxn=self.pcie_rx_n,
            o_pci_exp_txp=self.pcie_tx_p, o_pci_exp_txn=self.pcie_tx_n,
            o_user_clk=user_clk, o_user_reset=user_reset, o_user_lnk_up=link_up,
            o_m_axis_cq_tdata=card.cq.tdata, o_m_axis_cq_tkeep=card.cq.tkeep, o_m_axis_cq_tlast=card.cq.tlast,
            o_m_axis_cq_tuser=card.cq.tuser, o_m_axis_cq_tvalid=card.cq.tvalid, i_m_axis_cq_tready=card.cq.tready,
            i_s_axis_cc_tdata=card.cc.tdata, i_s_axis_cc_tkeep=card.cc.tkeep, i_s_axis_cc_tlast=card.cc.tlast,
            i_s_axis_cc_tuser=card.cc.tuser, i_s_axis_cc_tvalid=card.cc.tvalid, o_s_axis_cc_tready=cc_ready,
            i_s_axis_rq_tdata=card.rq.tdata, i_s_axis_rq_tkeep=card.rq.tkeep, i_s_axis_rq_tlast=card.rq.tlast,
            i_s_axis_rq_tuser=card.rq.tuser, i_s_axis_rq_tvalid=card.rq.tvalid, o_s_axis_rq_tready=rq_ready,
            o_m_axis_rc_tdata=card.rc.tdata, o_m_axis_rc_tkeep=card.rc.tkeep, o_m_axis_rc_tlast=card.rc.tlast,
            o_m_axis_rc_tuser=card.rc.tuser, o_m_axis_rc_tvalid=card.rc.tvalid, i_m_axis_rc_tready=card.rc.tready,
            # a non-posted credit every cycle: BAR reads are never held back by the block
            i_pcie_cq_np_req=Const(0b01, 2),
            # a function-level reset is acknowledged one cycle after it starts: the engine keeps no per-function state
            o_cfg_flr_in_process=flr_in_process, i_cfg_flr_done=flr_in_process & ~flr_seen,
            i_cfg_config_space_enable=Const(1, 1), i_cfg_link_training_enable=Const(1, 1),
            i_cfg_power_state_change_ack=Const(1, 1),
            o_cfg_max_read_req=max_read_req, o_cfg_max_payload=max_payload,
        )
        m.d.comb += [sync.clk.eq(user_clk), sync.rst.eq(user_reset),
                     card.cc.tready.eq(cc_ready[0]), card.rq.tready.eq(rq_ready[0]),
                     card.cfg_max_read_req.eq(max_read_req), card.cfg_max_payload.eq(max_payload)]
        m.d.sync += flr_seen.eq(flr_in_process)

        sys_ibuf = Signal()
        m.submodules.sysclk_ibuf = Instance("IBUFDS", i_I=self.sysclk_p, i_IB=self.sysclk_n, o_O=sys_ibuf)
        m.submodules.sysclk_bufg = Instance("BUFG", i_I=sys_ibuf, o_O=sys.clk)

        heartbeat = Signal(HEARTBEAT_BIT + 1)
        m.d.sys += heartbeat.eq(heartbeat + 1)
        activity = Signal(range(ACTIVITY_CYCLES))
        with m.If((card.cq.tvalid & card.cq.tready) | (card.rq.tvalid & card.rq.tready)):
            m.d.sync += activity.eq(ACTIVITY_CYCLES - 1)
        with m.Elif(activity != 0):
            m.d.sync += activity.eq(activity - 1)
        m.d.comb += [self.led[0].eq(heartbeat[-1]), self.led[1].eq(link_up), self.led[2].eq(activity != 0)]
        return m
