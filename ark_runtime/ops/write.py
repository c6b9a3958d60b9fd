"""A state written in place: `value`'s rows into rows [row, row + n) of the state (2-D views, the same columns), at a
row given as an int or read from an int32 tensor the GPU holds (a KV cache's position). With a row tensor of one
element per value row and a `stride`, value row i goes to row i * stride + rows[i] instead: one position per
sequence of a batch, each sequence's cache `stride` rows of the state. The output is the state as
written (its memory is the state's: Tensor.alias); ops after it in the model read what it wrote, ops before it read
what it wrote the iteration before. A row outside the state faults the kernel (BAD_INDEX) and raises BadIndex in the
reference."""

from __future__ import annotations

import numpy as np

from ark_runtime.graph import ModelError, Op, Tensor
from ark_runtime.ops.blocks import row_blocks
from ark_runtime.ops.spec import BadIndex, Built, OpSpec, no_attrs
from ark_runtime.tiling import Region


class _Rows:
    """A tensor's 2-D view as row_blocks takes it."""

    def __init__(self, rows: int, cols: int):
        self.rows, self.cols = rows, cols


class Write(OpSpec):
    kind = "write"

    def build(self, fn: str, inputs: tuple[Tensor, ...], attrs: dict) -> Built:
        if len(inputs) not in (2, 3):
            raise ModelError(f"write takes a state, a value and perhaps a row tensor, not {len(inputs)} tensors")
        state, value = inputs[:2]
        if value.dtype != state.dtype or value.cols != state.cols or value.rows > state.rows:
            raise ModelError(f"write: {value.name} {value.shape} {value.dtype} does not fit rows of {state.name} "
                             f"{state.shape} {state.dtype}: give the state's dtype and last axis, and no more rows")
        if len(inputs) == 3:
            no_attrs("write", attrs, ("stride",))
            row = inputs[2]
            if row.dtype != "int32" or row.elements not in (1, value.rows):
                raise ModelError(f"write: the row {row.name} must be an int32 tensor of one element, or of one per "
                                 f"value row ({value.rows}), not {row.dtype} {row.shape}")
            stride = attrs.get("stride")
            if row.elements > 1 or stride is not None:
                if row.elements != value.rows or isinstance(stride, bool) or not isinstance(stride, int) \
                        or not 1 <= stride or value.rows * stride > state.rows:
                    raise ModelError(f"write: a row per value row takes stride, the rows of each sequence's block "
                                     f"(value rows x stride within the state's {state.rows}), not stride={stride!r} "
                                     f"with {row.elements} rows for {value.rows} value rows")
                extra = {"stride": stride}
            else:
                extra = {}
        else:
            no_attrs("write", attrs, ("row",))
            r = attrs.get("row", 0)
            if isinstance(r, bool) or not isinstance(r, int) or not 0 <= r <= state.rows - value.rows:
                raise ModelError(f"write: row={r!r} must be an int in 0..{state.rows - value.rows} for {value.rows} "
                                 f"rows into {state.name}'s {state.rows}")
            extra = {"row": r}
        return Built(state.shape, state.dtype, extra, placement=state.placement, writes_in_place=0)

    def reference(self, op: Op, args: list[np.ndarray]) -> np.ndarray:
        state, value = args[:2]
        out = np.array(state, dtype=np.float64, copy=True)
        flat, rows = out.reshape(-1, state.shape[-1]), np.asarray(value).reshape(-1, state.shape[-1])
        if len(args) == 3 and op.attr("stride") is not None:  # one row per value row
            wanted = np.asarray(args[2], np.float64).reshape(-1)
            if np.isnan(wanted).any():  # not yet written (reference.run_plan): nothing known
                return np.full_like(out, np.nan)
            stride = op.attr("stride")
            for i, r in enumerate(wanted):
                if r != int(r) or not 0 <= r < stride:
                    raise BadIndex(f"write (op {op.id}): row {r:g} of value row {i} is outside its block of "
                                   f"{stride} rows")
                flat[i * stride + int(r)] = rows[i]
            return out
        if len(args) == 3:
            r = float(np.asarray(args[2]).reshape(-1)[0])
            if np.isnan(r):  # not yet written (reference.run_plan): nothing known
                return np.full_like(out, np.nan)
        else:
            r = op.attr("row")
        if r != int(r) or not 0 <= r <= flat.shape[0] - rows.shape[0]:
            raise BadIndex(f"write (op {op.id}): row {r:g} puts {rows.shape[0]} rows outside the state's "
                           f"{flat.shape[0]}")
        flat[int(r):int(r) + rows.shape[0]] = rows
        return out

    def bad_index(self, op: Op, detail: int) -> str:
        stride = op.attr("stride")
        if stride is not None:  # write_each_row: a sequence's row, in its own block of `stride` rows
            return (f"a sequence's row {detail - 1} is outside its block of {stride} rows (its cache is full)"
                    if detail > 1 else "a sequence's row is below 0")
        return f"the write's row {detail - 1} puts its rows outside the state" if detail > 1 else \
            "the write's row is below 0"

    def variant(self, model, op: Op, device) -> dict:
        row = "constant" if len(op.inputs) == 2 else "each" if op.attr("stride") is not None else "tensor"
        return {"template": "write_rows" if row != "each" else "write_each_row", "row": row}

    def tiles(self, tm, op: Op, v: dict) -> None:
        state, value = tm.ins[:2]
        n, cols = value.rows, state.cols
        if len(op.inputs) == 3:  # where it writes is known at run time only: one tile, all of the state
            reads = [Region.whole(value), Region.whole(state), Region.whole(tm.ins[2])]
            tm.add(0, state.rows, 0, cols, reads, 2 * n * cols * tm.esize, 0)
            return
        row = op.attr("row")
        for r0, r1, _, _ in row_blocks(_Rows(n, cols), tm.num_sms):
            tm.add(row + r0, row + r1, 0, cols, [Region(value.id, r0, r1, 0, cols)], 2 * (r1 - r0) * cols * tm.esize,
                   0)

    def emit(self, e, op: Op, v: dict) -> str:
        state, value = e.tensor(op.inputs[0]), e.tensor(op.inputs[1])
        ct = e.ctype(state)
        if v["row"] == "each":
            return (f"{{ const int bad = ark::write_each_row<{ct}>({e.ptr(value.id)}, ({ct}*)T[{op.output}], "
                    f"{state.cols}, (const int*)T[{op.inputs[2]}], {value.rows}, {op.attr('stride')});"
                    + ("\n      __threadfence_system();" if state.placement == "host" else "") + "\n"
                    "      if (bad) return ((unsigned long long)ark::FAULT_BAD_INDEX << 32) | (unsigned)bad; }")
        if len(op.inputs) == 3:
            where = f"*(const int*)T[{op.inputs[2]}]"
            rows = f"0, {value.rows}"
        else:
            where = str(op.attr("row"))
            rows = f"r0 - {op.attr('row')}, r1 - {op.attr('row')}"
        # into pinned host memory: in memory before anything after it (a count the host polls) is
        fence = "\n      __threadfence_system();" if state.placement == "host" else ""
        return (f"{{ const int bad = ark::write_rows<{ct}>({e.ptr(value.id)}, ({ct}*)T[{op.output}], {state.cols}, "
                f"{rows}, {where}, {value.rows}, {state.rows});{fence}\n"
                "      if (bad) return ((unsigned long long)ark::FAULT_BAD_INDEX << 32) | (unsigned)bad; }")


SPEC = Write()
