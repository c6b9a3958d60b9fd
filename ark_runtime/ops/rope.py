"""Rotary embedding of x [..., S, heads * D] with cos/sin [S, D/2], each head's D columns turned by the same angles
(elementwise.cuh's rope_tile and rope_heads_tile); or with cos/sin of a row of angles for every row of x (x's rows
folded, as an embedding of positions gives them: a batch of sequences each at its own position). Two conventions
pair the columns:

  interleaved (the default; Meta's Llama code)  columns 2j and 2j+1 of a head turn together by angle j
  half (Hugging Face's rotate_half)             columns j and j + D/2 of a head turn together by angle j

`head_dim` is D (the default: x's last axis, one head). An op with both defaults keeps no attributes and the
rope_tile call it always had, so models written before the attributes existed lower to the same plan and kernel."""

from __future__ import annotations

import numpy as np

from ark_runtime.graph import ModelError, Op, Tensor
from ark_runtime.ops.blocks import elementwise_blocks, elementwise_tiles
from ark_runtime.ops.spec import Built, OpSpec, arity, no_attrs, require_float
from ark_runtime.tiling import Region

STYLES = ("interleaved", "half")


def _head_dim(x: Tensor, head_dim) -> int:
    if head_dim is None:
        return x.shape[-1]
    if isinstance(head_dim, bool) or not isinstance(head_dim, int) or head_dim <= 0:
        raise ModelError(f"rope: head_dim must be a positive int (each head's columns), not {head_dim!r}")
    if head_dim % 2 or x.shape[-1] % head_dim:
        raise ModelError(f"rope: head_dim {head_dim} must be even and divide x's last axis {x.shape[-1]} (x is "
                         f"[..., S, heads * head_dim])")
    return head_dim


class Rope(OpSpec):
    kind = "rope"

    def build(self, fn: str, inputs: tuple[Tensor, ...], attrs: dict) -> Built:
        arity("rope", inputs, 3)
        no_attrs("rope", attrs, ("style", "head_dim"))
        x, cos, sin = inputs
        require_float("rope", x)
        style = attrs.get("style", "interleaved")
        if style not in STYLES:
            raise ModelError(f"rope: style {style!r} is not one of {', '.join(map(repr, STYLES))} (columns 2j, 2j+1 "
                             "or j, j + D/2 turned together)")
        if len(x.shape) < 2 or x.shape[-1] % 2:
            raise ModelError(f"rope: x must be [..., S, D] with D even, not {x.shape}")
        hd = _head_dim(x, attrs.get("head_dim"))
        want = [(x.shape[-2], hd // 2), (x.rows, hd // 2)]
        if cos.shape not in want or sin.shape != cos.shape:
            raise ModelError(f"rope: cos and sin must both be {want[0]} (S, head_dim / 2), or {want[1]} (a row of "
                             f"angles per row of x), for x {x.shape} with head_dim {hd}, not {cos.shape} and "
                             f"{sin.shape}")
        if cos.dtype != x.dtype or sin.dtype != x.dtype:
            raise ModelError(f"rope: cos and sin must be {x.dtype} like x, not {cos.dtype} and {sin.dtype}")
        kept = {}  # defaults are not kept: the op, its plan and its kernel stay what they were without the attributes
        if style != "interleaved":
            kept["style"] = style
        if hd != x.shape[-1]:
            kept["head_dim"] = hd
        return Built(x.shape, x.dtype, kept)

    def reference(self, op: Op, args: list[np.ndarray]) -> np.ndarray:
        x, cos, sin = args
        hd = op.attr("head_dim", x.shape[-1])
        xh = x.reshape((-1, cos.shape[0], x.shape[-1] // hd, hd))  # [..., S, heads, D], or [1, rows, heads, D]
        c, s = cos[:, None, :], sin[:, None, :]  # [S, 1, D/2]: the same angles for every head
        out = np.empty_like(xh)
        if op.attr("style", "interleaved") == "half":
            x1, x2 = xh[..., :hd // 2], xh[..., hd // 2:]
            out[..., :hd // 2] = x1 * c - x2 * s
            out[..., hd // 2:] = x2 * c + x1 * s
        else:
            x1, x2 = xh[..., 0::2], xh[..., 1::2]
            out[..., 0::2] = x1 * c - x2 * s
            out[..., 1::2] = x1 * s + x2 * c
        return out.reshape(x.shape)

    def variant(self, model, op: Op, device) -> dict:
        if op.attr("style") is None and op.attr("head_dim") is None:
            return {"template": "rope_tile"}
        x = model.tensors[op.inputs[0]]
        return {"template": "rope_heads_tile", "style": op.attr("style", "interleaved"),
                "head_dim": op.attr("head_dim", x.cols)}

    def tiles(self, tm, op: Op, v: dict) -> None:
        if v["template"] == "rope_tile":
            elementwise_tiles(tm, pairs=True)
            return
        # a tile's columns may cut a head: it reads the whole heads it writes a part of (in the half style the
        # partner of column j is D/2 away); interleaved pairs never straddle a tile (pairs=True, heads even)
        x, cos, sin = tm.ins
        out, hd = tm.out, v["head_dim"]
        for r0, r1, c0, c1 in elementwise_blocks(out, tm.num_sms, pairs=True):
            n = (r1 - r0) * (c1 - c0)
            h0, h1 = c0 // hd * hd, -(-c1 // hd) * hd
            tm.add(r0, r1, c0, c1, [Region(x.id, r0, r1, h0, h1), Region.whole(cos), Region.whole(sin)],
                   n * tm.esize * 4, n * 8)

    def emit(self, e, op: Op, v: dict) -> str:
        out = e.tensor(op.output)
        angles = e.tensor(op.inputs[1]).shape[0]  # row r of x turned by the angles of row r % angles
        ptrs = ", ".join(e.ptr(i) for i in op.inputs)
        if v["template"] == "rope_tile":
            return (f"ark::rope_tile<{e.ctype(out)}>({ptrs}, {e.ptr(out.id, const=False)}, {angles}, "
                    f"{out.cols}, r0, r1, c0, c1);")
        half = "true" if v["style"] == "half" else "false"
        return (f"ark::rope_heads_tile<{e.ctype(out)}, {half}>({ptrs}, {e.ptr(out.id, const=False)}, {angles}, "
                f"{out.cols}, {v['head_dim']}, r0, r1, c0, c1);")


SPEC = Rope()
