"""The sum of one tensor of each rank, computed by one rank (peers.cuh's reduce_peers_tile): what a World makes of
an all-reduce or a reduce-scatter. Inputs x_0 .. x_{n-1}, one per rank, in rank order (the sum's order, so every
rank that sums the same inputs gets the same bits); `window` (r0, r1, c0, c1) picks a region of their 2-D views,
and the output is that region, [r1 - r0, c1 - c0] or the `shape` given (without a window, the inputs' shape). Tiles as an elementwise op's,
each reading its region of every input: the rows a tile reads of a peer's tensor wait for that peer's tiles that
write them."""

from __future__ import annotations

import math

import numpy as np

from ark_runtime.graph import ModelError, Op, Tensor
from ark_runtime.ops.blocks import elementwise_blocks
from ark_runtime.ops.spec import Built, OpSpec, no_attrs, require_float
from ark_runtime.tiling import Region


def check_window(op: str, window, rows: int, cols: int) -> tuple[int, int, int, int]:
    if not (isinstance(window, tuple) and len(window) == 4 and all(isinstance(v, int) and not isinstance(v, bool)
                                                                   for v in window)):
        raise ModelError(f"{op}: window={window!r} must be (r0, r1, c0, c1), four ints")
    r0, r1, c0, c1 = window
    if not (0 <= r0 < r1 <= rows and 0 <= c0 < c1 <= cols):
        raise ModelError(f"{op}: window {window} is not a region of a [{rows}, {cols}] view")
    return window


class ReducePeers(OpSpec):
    kind = "reduce_peers"
    written_by_passes = True

    def build(self, fn: str, inputs: tuple[Tensor, ...], attrs: dict) -> Built:
        no_attrs("reduce_peers", attrs, ("window", "shape"))
        if len(inputs) < 2:
            raise ModelError(f"reduce_peers sums two or more tensors (one per rank), not {len(inputs)}")
        x = inputs[0]
        require_float("reduce_peers", x)
        for t in inputs[1:]:
            if (t.shape, t.dtype) != (x.shape, x.dtype):
                raise ModelError(f"reduce_peers: {t.name} {t.shape} {t.dtype} is not {x.name}'s {x.shape} {x.dtype}")
        window = attrs.get("window")
        if window is None:
            return Built(x.shape, x.dtype)
        r0, r1, c0, c1 = check_window("reduce_peers", window, x.rows, x.cols)
        shape = attrs.get("shape", (r1 - r0, c1 - c0))
        if not isinstance(shape, tuple) or not shape or shape[-1] != c1 - c0 \
                or math.prod(shape) != (r1 - r0) * (c1 - c0):
            raise ModelError(f"reduce_peers: shape={shape!r} must hold the window's {r1 - r0} x {c1 - c0} elements, "
                             f"{c1 - c0} to a row")
        return Built(shape, x.dtype, {"window": window, **({"shape": shape} if "shape" in attrs else {})})

    def reference(self, op: Op, args: list[np.ndarray]) -> np.ndarray:
        total = np.zeros_like(np.asarray(args[0], np.float64))
        for a in args:
            total = total + a
        window = op.attr("window")
        if window is None:
            return total
        r0, r1, c0, c1 = window
        return np.ascontiguousarray(total.reshape(-1, total.shape[-1])[r0:r1, c0:c1]).reshape(
            op.attr("shape", (r1 - r0, c1 - c0)))

    def variant(self, model, op: Op, device) -> dict:
        return {"template": "reduce_peers_tile"}

    def tiles(self, tm, op: Op, v: dict) -> None:
        wr0, _, wc0, _ = op.attr("window") or (0, 0, 0, 0)
        n_in = len(tm.ins)
        for r0, r1, c0, c1 in elementwise_blocks(tm.out, tm.num_sms):
            n = (r1 - r0) * (c1 - c0)
            reads = [Region(t.id, wr0 + r0, wr0 + r1, wc0 + c0, wc0 + c1) for t in tm.ins]
            tm.add(r0, r1, c0, c1, reads, n * tm.esize * (n_in + 1), n * n_in)

    def emit(self, e, op: Op, v: dict) -> str:
        out, x = e.tensor(op.output), e.tensor(op.inputs[0])
        ct, n = e.ctype(out), len(op.inputs)
        wr0, _, wc0, _ = op.attr("window") or (0, 0, 0, 0)
        ptrs = ", ".join(e.ptr(i) for i in op.inputs)
        return (f"ark::reduce_peers_tile<{ct}, {n}>(ark::PeerTensors<{ct}, {n}>{{{{{ptrs}}}}}, "
                f"{e.ptr(out.id, const=False)}, {x.cols}, {out.cols}, {wr0}, {wc0}, r0, r1, c0, c1);")


SPEC = ReducePeers()
