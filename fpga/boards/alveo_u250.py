"""The AMD/Xilinx Alveo U250 as a PCIe card for the engine: part, pins, clocks, PCIe block placement and flash.

Why this board: its UltraScale+ device has PCIe Gen3 x16 hard blocks (PCIE40E4) that the free Vivado IP
"UltraScale+ Integrated Block for PCI Express" (pcie4_uscale_plus) drives with no licence; at Gen3 x8 that block's
user interface is 256 bits at 250 MHz, the width the front end (rtl/pcie_completer.py, rtl/pcie_requester.py) is
built for and was simulated at; the card is common (data-centre surplus, academic programmes) and every Vivado
release supports its part. The U200 is the same board with a smaller device (xcu200-fsgd2104-2-e): the pins
below are the same, only `part` and `hw_device` change.

Pin facts agree across three public sources for this board: the U200/U250 XDC of alexforencich/verilog-pcie
(example/Alveo/fpga/fpga_au200.xdc), corundum's Alveo U250 XDC (fpga/mqnic/AU250/fpga_100g/fpga.xdc) and
open-power/capi2-bsp's U200 XDC (from AMD's board file au200 part0_pins.xml). What could not be checked that way
is in UNVERIFIED, with its source, and nowhere else.

The design uses the connector's lanes 0-7 (an x8 link in the x16 slot): GTY quads 227 (lanes 0-3) and 226
(lanes 4-7), reference clock MGTREFCLK0 of quad 226.
"""

from __future__ import annotations

from fpga.boards.spec import Clock, PcieBoard, Pin, Port, Unverified

PART = "xcu250-figd2104-2L-e"

# Lane i of the edge connector: (rx_p, rx_n, tx_p, tx_n) package pins; the GTY channel in the comment.
LANE_PINS = (
    ("AF2", "AF1", "AF7", "AF6"),  # MGTY 227 channel 3
    ("AG4", "AG3", "AG9", "AG8"),  # MGTY 227 channel 2
    ("AH2", "AH1", "AH7", "AH6"),  # MGTY 227 channel 1
    ("AJ4", "AJ3", "AJ9", "AJ8"),  # MGTY 227 channel 0
    ("AK2", "AK1", "AK7", "AK6"),  # MGTY 226 channel 3
    ("AL4", "AL3", "AL9", "AL8"),  # MGTY 226 channel 2
    ("AM2", "AM1", "AM7", "AM6"),  # MGTY 226 channel 1
    ("AN4", "AN3", "AN9", "AN8"),  # MGTY 226 channel 0
)
LED_PINS = ("BC21", "BB21", "BA20")  # the three user LEDs


def _gt(column: int) -> tuple[Pin, ...]:
    return tuple(Pin(lane[column]) for lane in LANE_PINS)


def _cmos(site: str, *extra: tuple[str, str]) -> Pin:
    return Pin(site, "LVCMOS12", extra)


UNVERIFIED = (
    Unverified("PCIe hard block used for the edge connector (CONFIG.pcie_blk_locn)", "X1Y2",
               "open-power/capi2-bsp U200/xdc/capi_bsp_io.xdc: comment 'PCIE BANK 227/226/225/224 (SLR1 X1Y2) - "
               "to be checked'; another public U200 x8 project sets X1Y4. Vivado refuses a block that cannot "
               "reach quad 227 at IP generation, so a wrong value fails the build, not the card"),
    Unverified("GT quad that holds lane 0 (CONFIG.select_quad)", "GTY_Quad_227",
               "lane 0 is on MGTY bank 227 in all three XDCs; that the IP names the start quad this way is "
               "from public xdma/qdma configurations of Alveo cards, not from this board's files"),
    Unverified("GT channel site names (GTYE4_CHANNEL_X1Y..)", "not used",
               "two public XDCs name lane 0's channel X1Y35 and X1Y31; the XDC here places package pins only"),
    Unverified("300 MHz SYSCLK0 I/O standard", "DIFF_SSTL12 on AY37/AY38",
               "the pins agree in two XDCs; one gives DIFF_SSTL12, the other (commented out) LVDS"),
    Unverified("configuration flash", "mt25qu01g-spi-x1_x2_x4, 128 MB, SPIx4, image at 0x01002000",
               "AMD's Alveo custom-image flow (the user image above the golden one); one public U250 XDC sets "
               "SPI_BUSWIDTH 8 where two others set 4"),
    Unverified("device name in the hardware manager", "xcu250_0", "Vivado's <part>_<index> naming"),
)

ALVEO_U250 = PcieBoard(
    name="alveo-u250",
    description="AMD/Xilinx Alveo U250 (xcu250-figd2104-2L-e), PCIe Gen3 x8 in the x16 edge connector",
    part=PART,
    ports=(
        Port("pcie_refclk_p", "input", (Pin("AM11"),)),  # MGTREFCLK0P_226, 100 MHz from the host
        Port("pcie_refclk_n", "input", (Pin("AM10"),)),
        Port("pcie_perst_n", "input", (_cmos("BD21", ("PULLUP", "true")),)),  # PCIE_PERST_LS, active low
        Port("pcie_rx_p", "input", _gt(0)),
        Port("pcie_rx_n", "input", _gt(1)),
        Port("pcie_tx_p", "output", _gt(2)),
        Port("pcie_tx_n", "output", _gt(3)),
        Port("sysclk_p", "input", (Pin("AY37", "DIFF_SSTL12"),)),  # SYSCLK0, 300 MHz
        Port("sysclk_n", "input", (Pin("AY38", "DIFF_SSTL12"),)),
        Port("led", "output", tuple(_cmos(s, ("DRIVE", "8"), ("SLEW", "SLOW")) for s in LED_PINS)),
    ),
    clocks=(Clock("pcie_refclk_p", 100.0), Clock("sysclk_p", 300.0)),
    pcie_lanes=len(LANE_PINS),
    pcie_block="X1Y2",
    pcie_quad="GTY_Quad_227",
    flash_part="mt25qu01g-spi-x1_x2_x4",
    flash_interface="SPIx4",
    flash_size_mb=128,
    flash_address=0x01002000,
    bitstream_properties=(
        ("CFGBVS", "GND"),
        ("CONFIG_VOLTAGE", "1.8"),
        ("CONFIG_MODE", "SPIx4"),
        ("BITSTREAM.GENERAL.COMPRESS", "TRUE"),
        ("BITSTREAM.CONFIG.CONFIGFALLBACK", "ENABLE"),
        ("BITSTREAM.CONFIG.EXTMASTERCCLK_EN", "DISABLE"),
        ("BITSTREAM.CONFIG.CONFIGRATE", "63.8"),
        ("BITSTREAM.CONFIG.SPI_32BIT_ADDR", "YES"),
        ("BITSTREAM.CONFIG.SPI_BUSWIDTH", "4"),
        ("BITSTREAM.CONFIG.SPI_FALL_EDGE", "YES"),
        ("BITSTREAM.CONFIG.UNUSEDPIN", "PULLUP"),
    ),
    hw_device="xcu250_0",
    unverified=UNVERIFIED,
)
