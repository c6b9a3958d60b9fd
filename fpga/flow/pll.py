"""An ECP5 PLL for the board top, configured by Project Trellis' ecppll (YoWASP), which writes its Verilog."""

from __future__ import annotations

import re
import tempfile
from dataclasses import dataclass
from pathlib import Path

from fpga.flow import toolchain
from fpga.errors import FpgaFlowError, ReportError

MODULE = "arkdma_pll"
CLKOP_RANGE_MHZ = (10.0, 400.0)  # ecppll's limits for the primary output


@dataclass(frozen=True)
class PllConfig:
    input_mhz: float
    requested_mhz: float
    output_mhz: float  # what the dividers give, which ecppll reports
    verilog: str  # module arkdma_pll(input clkin, output clkout0, output locked)


def configure(input_mhz: float, output_mhz: float, workdir: Path | None = None) -> PllConfig:
    """Runs ecppll for `input_mhz` -> `output_mhz`; the nearest frequency the dividers reach is in output_mhz."""
    low, high = CLKOP_RANGE_MHZ
    if not low <= output_mhz <= high:
        raise FpgaFlowError(f"the ECP5 PLL makes {low:g}-{high:g} MHz, not {output_mhz:g} MHz")
    ecppll = toolchain.find("ecppll")
    with tempfile.TemporaryDirectory() as tmp:
        folder = workdir or Path(tmp)
        folder.mkdir(parents=True, exist_ok=True)
        log, out = folder / "ecppll.log", folder / f"{MODULE}.v"
        ecppll.run(["-n", MODULE, "-i", f"{input_mhz:g}", "-o", f"{output_mhz:g}", "-f", out.name], log, folder, 120)
        found = re.search(r"clkout0 frequency: ([0-9.]+) MHz", log.read_text())
        if not found:
            raise ReportError(f"ecppll did not print the frequency it reached; see {log}")
        return PllConfig(input_mhz, output_mhz, float(found.group(1)), out.read_text())
