"""The ports of the Xilinx UltraScale+ PCIe IP (pcie4_uscale_plus) and of the clock buffers that the card top
instantiates, as one table: the top's Instances are checked against it, and a dry run writes blackbox stubs from
it so the top synthesizes without Vivado. Only the ports the top connects are listed; Vivado ties the IP's other
inputs to zero, which is their idle value (no interrupts, no messages, no configuration-management access)."""

from __future__ import annotations

from dataclasses import dataclass

from rtl.pcie_completer import CC_USER_BITS, CQ_USER_BITS, DWORDS, WIDTH
from rtl.pcie_requester import RC_USER_BITS, RQ_USER_BITS

IP_NAME = "pcie4_uscale_plus"  # the IP in Vivado's catalogue
IP_MODULE = "arkdma_pcie4"  # create_ip -module_name: the module the top instantiates


@dataclass(frozen=True)
class BlackboxPort:
    name: str
    direction: str  # "input" | "output"
    width: int = 1


def _stream(prefix: str, source_is_ip: bool, user_bits: int, ready_bits: int) -> tuple[BlackboxPort, ...]:
    out, inp = ("output", "input") if source_is_ip else ("input", "output")
    return (BlackboxPort(f"{prefix}_tdata", out, WIDTH), BlackboxPort(f"{prefix}_tkeep", out, DWORDS),
            BlackboxPort(f"{prefix}_tlast", out), BlackboxPort(f"{prefix}_tuser", out, user_bits),
            BlackboxPort(f"{prefix}_tvalid", out), BlackboxPort(f"{prefix}_tready", inp, ready_bits))


def pcie_ip_ports(lanes: int) -> tuple[BlackboxPort, ...]:
    """The IP's ports at a 256-bit interface with `lanes` lanes (PG213's names; tready of RQ and CC is 4 copies)."""
    return (
        BlackboxPort("sys_clk", "input"), BlackboxPort("sys_clk_gt", "input"), BlackboxPort("sys_reset", "input"),
        BlackboxPort("pci_exp_rxp", "input", lanes), BlackboxPort("pci_exp_rxn", "input", lanes),
        BlackboxPort("pci_exp_txp", "output", lanes), BlackboxPort("pci_exp_txn", "output", lanes),
        BlackboxPort("user_clk", "output"), BlackboxPort("user_reset", "output"),
        BlackboxPort("user_lnk_up", "output"), BlackboxPort("phy_rdy_out", "output"),
        *_stream("m_axis_cq", True, CQ_USER_BITS, 1),
        *_stream("s_axis_cc", False, CC_USER_BITS, 4),
        *_stream("s_axis_rq", False, RQ_USER_BITS, 4),
        *_stream("m_axis_rc", True, RC_USER_BITS, 1),
        BlackboxPort("pcie_cq_np_req", "input", 2),
        BlackboxPort("cfg_flr_in_process", "output", 4), BlackboxPort("cfg_flr_done", "input", 4),
        BlackboxPort("cfg_config_space_enable", "input"), BlackboxPort("cfg_link_training_enable", "input"),
        BlackboxPort("cfg_power_state_change_ack", "input"),
        # the host's Max_Read_Request_Size (0: 128 bytes ... 5: 4096) and Max_Payload_Size (0: 128 ... 3: 1024)
        BlackboxPort("cfg_max_read_req", "output", 3), BlackboxPort("cfg_max_payload", "output", 2),
    )


# UltraScale+ primitives the top uses (UG974), with the ports it connects.
PRIMITIVES = {
    "IBUFDS_GTE4": (BlackboxPort("I", "input"), BlackboxPort("IB", "input"), BlackboxPort("CEB", "input"),
                    BlackboxPort("O", "output"), BlackboxPort("ODIV2", "output")),
    "IBUFDS": (BlackboxPort("I", "input"), BlackboxPort("IB", "input"), BlackboxPort("O", "output")),
    "BUFG": (BlackboxPort("I", "input"), BlackboxPort("O", "output")),
}
PRIMITIVE_PARAMETERS = {"IBUFDS_GTE4": ("REFCLK_HROW_CK_SEL", "REFCLK_EN_TX_PATH", "REFCLK_ICNTL_RX")}


def blackbox_verilog(lanes: int) -> str:
    """Verilog blackbox modules for the IP and the primitives: what a generic synthesis needs in their place."""
    modules = {IP_MODULE: pcie_ip_ports(lanes), **PRIMITIVES}
    text = ["// Blackboxes for a synthesis without Vivado: the PCIe IP and the UltraScale+ primitives.\n"]
    for name, ports in modules.items():
        text.append(f"(* blackbox *)\nmodule {name}({', '.join(p.name for p in ports)});\n")
        for parameter in PRIMITIVE_PARAMETERS.get(name, ()):
            text.append(f"  parameter {parameter} = 0;\n")
        for p in ports:
            text.append(f"  {p.direction} {f'[{p.width - 1}:0] ' if p.width > 1 else ''}{p.name};\n")
        text.append("endmodule\n\n")
    return "".join(text)
