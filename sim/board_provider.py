"""The `card-uart-sim` engine: the `card-uart` backend (fpga/link/board.py) on the board design simulated
(sim/board.py): host code, bridge frames, UART, engine and RAM as on the board, with no board."""

from __future__ import annotations

from driver.abi import Capability
from driver.provider import EngineProvider
from sim.provider import RTL_CAPS


class SimBoardProvider(EngineProvider):
    name = "card-uart-sim"
    summary = "the card-uart backend on the ECP5 board's design under Verilator (UART bridge, engine, RAM)"
    max_workload_bytes = 64 << 10
    workload_pace = "32-bit words over a simulated serial line"

    def unavailable_reason(self) -> str | None:
        from sim.toolchain import missing

        return missing()

    def capabilities(self) -> Capability:
        return RTL_CAPS

    def cannot_play(self, scenario) -> str | None:
        from fpga.link.board import RAM_ALIGN
        from sim.board import RAM_BYTES

        need = sum(-(-b.size // RAM_ALIGN) * RAM_ALIGN for b in scenario.buffers)
        if need > RAM_BYTES:
            return f"its buffers ({need:,} bytes) do not fit the simulated board's RAM ({RAM_BYTES:,} bytes)"
        return None

    def open(self, console=None, **params):
        from fpga.link.board import BoardBackend
        from fpga.link.serial_link import SerialLink
        from sim.board import BoardSimulation, board_params

        sim = BoardSimulation(board_params(**params), console=console).start()
        try:
            link = SerialLink(sim.url, timeout_s=60.0)
        except BaseException:
            sim.stop()
            raise

        def stop() -> None:
            link.close()
            sim.stop()

        try:
            return BoardBackend(link, on_close=stop)
        except BaseException:
            stop()
            raise

    def run_scenarios(self, scenarios, console=None, **params) -> dict:
        """Each geometry's scenarios on one simulated board, one after another (sim/board.py)."""
        from driver.scenario import by_geometry
        from fpga.link.board import play_scenarios
        from fpga.link.serial_link import SerialLink
        from sim.board import BoardSimulation, board_params

        groups = by_geometry(scenarios)
        outcomes = {}
        for (nq, slots, regions), batch in groups.items():
            sim = BoardSimulation(board_params(num_queues=nq, slots=slots, num_regions=regions, **params),
                                  console=console).start()
            try:
                with SerialLink(sim.url, timeout_s=60.0) as link:
                    outcomes.update(play_scenarios(link, batch))
            finally:
                sim.stop()
        return outcomes
