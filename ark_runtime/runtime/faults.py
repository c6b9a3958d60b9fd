"""The runtime's exceptions, and the control block's fault record (written by the kernel's first fault, loop.cuh's
`fault()`) turned into a message that names the SM, the tile and its op, and the counter a timed-out wait was on."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from ark_runtime.kernel.codes import FAULT_NAMES, GRAPH_WAIT_TIMEOUT, RELAUNCH_FAILED, Fault
from ark_runtime.model import Model
from ark_runtime.ops import spec
from ark_runtime.plan import Plan


class LoopError(RuntimeError):
    """The runtime cannot do what was asked; the message says why and what to do."""


class LoopFault(LoopError):
    """The resident kernel stopped on a fault; the message names the tile, its op and what went wrong."""


class LoopTimeout(LoopError):
    """The kernel did not finish the iterations asked for in time; it was stopped."""


@dataclass(frozen=True)
class FaultRecord:
    """The fault fields of the control block (records.CONTROL_DTYPE) as the kernel left them."""

    code: int
    sm: int
    tile: int  # -1: no tile
    counter: int  # the counter a TIMEOUT waited on, -1 when none
    expected: int
    observed: int
    detail: int

    @classmethod
    def from_control(cls, c) -> FaultRecord:
        """From one CONTROL_DTYPE record (a NumPy structured scalar or a row of one)."""
        return cls(int(c["fault"]), int(c["fault_sm"]), int(c["fault_tile"]), int(c["fault_counter"]),
                   int(c["fault_expected"]), int(c["fault_observed"]), int(c["fault_detail"]))


def cuda_error_name(code: int) -> str:
    """cudaErrorX: its message, or the number where CuPy cannot name it."""
    try:
        from cupy.cuda.runtime import CUDARuntimeError

        return str(CUDARuntimeError(code))
    except Exception:  # noqa: BLE001 - a name is a courtesy; the number is the fact
        return f"cudaError {code}"


def graph_fault(detail: int) -> str:
    """What a DEVICE_GRAPH fault's detail (copy.cuh, loop.cuh) means."""
    if detail == GRAPH_WAIT_TIMEOUT:
        return "the copy's device graph was launched but had not finished when the budget (budget_s) ran out"
    if detail >= RELAUNCH_FAILED:
        return f"relaunching the kernel's own graph (a tail launch) failed: {cuda_error_name(detail - RELAUNCH_FAILED)}"
    return f"the device-side launch of the copy's graph failed: {cuda_error_name(detail)}"


def describe_tile(model: Model, plan: Plan, tile: int) -> str:
    """'op 3 matmul -> h, rows 0:64', or 'no tile' for an index outside the plan (a fault outside any tile)."""
    if not 0 <= tile < len(plan.tiles):
        return "no tile"
    t = plan.tiles[tile]
    op = model.ops[t["op"]]
    where = f" on rank {plan.world['op_rank'][op.id]}" if plan.world else ""  # a World's: the GPU that runs it
    return f"op {op.id} {op.fn} -> {model.tensors[op.output].name}, rows {t['writes'][1]}:{t['writes'][2]}{where}"


def fault_message(record: FaultRecord, model: Model, plan: Plan,
                  dma_status: Callable[[], str] | None = None) -> str:
    """The LoopFault message for `record`: what went wrong, on which SM, at which tile (its op and rows), and the
    detail the fault code carries. `dma_status()` describes the DMA engine's queue, for a DMA fault."""
    try:
        code = Fault(record.code)
    except ValueError:
        code = None
    what = FAULT_NAMES.get(code, f"code {record.code}")
    if code is Fault.TIMEOUT:
        detail = _timeout_detail(record, model, plan)
    elif code is Fault.BAD_INDEX:
        tile = plan.tiles[record.tile] if 0 <= record.tile < len(plan.tiles) else None
        op = model.ops[tile["op"]] if tile is not None else None
        detail = spec(op.kind).bad_index(op, record.detail) if op is not None else \
            f"an index outside its table ({record.detail})"
    elif code is Fault.DMA:
        status = dma_status() if dma_status is not None else "no queue"
        detail = f"the DMA engine returned device code {record.detail}: {status}"
    elif code is Fault.GRAPH:
        detail = graph_fault(record.detail)
    else:
        detail = f"detail {record.detail}"
    return (f"{model.name}: {what} on SM {record.sm} at tile {record.tile} "
            f"({describe_tile(model, plan, record.tile)}): {detail}; the kernel stopped")


def _timeout_detail(record: FaultRecord, model: Model, plan: Plan) -> str:
    waited = f"waited {record.detail / 1e6:.1f} ms for"
    reached = f"to reach {record.expected} (it read {record.observed})"
    if not 0 <= record.counter < len(plan.counters):
        return f"{waited} counter {record.counter} {reached}"
    counter = plan.counters[record.counter]
    awaited = (f"tile {counter['of']} ({describe_tile(model, plan, counter['of'])})" if counter["kind"] == "tile"
               else f"every tile of op {counter['of']}")
    if plan.world and counter["kind"] == "op" and 0 <= counter["of"] < len(plan.world["op_rank"]):
        awaited += f" (rank {plan.world['op_rank'][counter['of']]})"
    return f"{waited} {awaited} {reached}"
