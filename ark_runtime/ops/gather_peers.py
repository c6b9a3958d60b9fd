"""One tensor made of parts from several ranks (peers.cuh's gather_window_tile): what a World makes of an
all-gather, and of a two-shot all-reduce's second half. Inputs part_0 .. part_{n-1}; `windows` gives each part's
region (r0, r1, c0, c1) of the output's 2-D view, `shape` the output's shape; a part's 2-D view is its window's
size. The windows tile the output without overlap. Each tile copies a block of one window, reading that block of
its part (a peer's tiles that write those rows first)."""

from __future__ import annotations

import math

import numpy as np

from ark_runtime.graph import ModelError, Op, Tensor
from ark_runtime.ops.blocks import elementwise_blocks
from ark_runtime.ops.reduce_peers import check_window
from ark_runtime.ops.spec import Built, OpSpec, no_attrs
from ark_runtime.tiling import Region


class _View:
    """A window's extent as elementwise_blocks takes a tensor."""

    def __init__(self, rows: int, cols: int):
        self.rows, self.cols, self.elements = rows, cols, rows * cols


class GatherPeers(OpSpec):
    kind = "gather_peers"
    written_by_passes = True

    def build(self, fn: str, inputs: tuple[Tensor, ...], attrs: dict) -> Built:
        no_attrs("gather_peers", attrs, ("shape", "windows"))
        shape, windows = attrs.get("shape"), attrs.get("windows")
        if not isinstance(shape, tuple) or not shape or not all(isinstance(s, int) and s > 0 for s in shape):
            raise ModelError(f"gather_peers: shape={shape!r} must be the output's shape, positive ints")
        rows, cols = math.prod(shape[:-1]), shape[-1]
        if not isinstance(windows, tuple) or len(windows) != len(inputs) or len(inputs) < 1:
            raise ModelError(f"gather_peers: windows must give one region per part ({len(inputs)}), not {windows!r}")
        covered = 0
        boxes = [check_window("gather_peers", w, rows, cols) for w in windows]
        for (r0, r1, c0, c1), t in zip(boxes, inputs):
            if (t.rows, t.cols) != (r1 - r0, c1 - c0) or t.dtype != inputs[0].dtype:
                raise ModelError(f"gather_peers: {t.name} {t.shape} {t.dtype} does not fill its window "
                                 f"{(r0, r1, c0, c1)} in {inputs[0].dtype}")
            covered += (r1 - r0) * (c1 - c0)
        for i, a in enumerate(boxes):
            for b in boxes[i + 1:]:
                if a[0] < b[1] and b[0] < a[1] and a[2] < b[3] and b[2] < a[3]:
                    raise ModelError(f"gather_peers: windows {a} and {b} overlap")
        if covered != rows * cols:
            raise ModelError(f"gather_peers: the windows cover {covered} of the output's {rows * cols} elements")
        return Built(shape, inputs[0].dtype, {"shape": shape, "windows": tuple(boxes)})

    def reference(self, op: Op, args: list[np.ndarray]) -> np.ndarray:
        shape = op.attr("shape")
        out = np.zeros((math.prod(shape[:-1]), shape[-1]))
        for (r0, r1, c0, c1), part in zip(op.attr("windows"), args):
            out[r0:r1, c0:c1] = np.asarray(part, np.float64).reshape(r1 - r0, c1 - c0)
        return out.reshape(shape)

    def variant(self, model, op: Op, device) -> dict:
        return {"template": "gather_window_tile"}

    def tiles(self, tm, op: Op, v: dict) -> None:
        for part, (wr0, wr1, wc0, wc1) in zip(tm.ins, op.attr("windows")):
            share = max(1, tm.num_sms * (wr1 - wr0) * (wc1 - wc0) // max(1, tm.out.elements))
            for r0, r1, c0, c1 in elementwise_blocks(_View(wr1 - wr0, wc1 - wc0), share):
                tm.add(wr0 + r0, wr0 + r1, wc0 + c0, wc0 + c1, [Region(part.id, r0, r1, c0, c1)],
                       2 * (r1 - r0) * (c1 - c0) * tm.esize, 0)

    def emit(self, e, op: Op, v: dict) -> str:
        out = e.tensor(op.output)
        ct = e.ctype(out)
        lines = []
        for k, (part, (wr0, wr1, wc0, wc1)) in enumerate(zip(op.inputs, op.attr("windows"))):
            test = f"r0 >= {wr0} && r0 < {wr1} && c0 >= {wc0} && c0 < {wc1}"
            lines.append(f"{'if' if k == 0 else 'else if'} ({test}) ark::gather_window_tile<{ct}>({e.ptr(part)}, "
                         f"{e.ptr(out.id, const=False)}, {wc1 - wc0}, {out.cols}, {wr0}, {wc0}, r0, r1, c0, c1);")
        return "\n      ".join(lines)


SPEC = GatherPeers()
