"""Causal or bidirectional attention per head, flash-style (attention.cuh): softmax(q k^T / sqrt(D)) v, with q
[..., Sq, heads * D] and k, v [..., Skv, kv_heads * D] as the projections make them. Grouped-query attention:
kv_heads divides heads, and query head h reads key/value head h // (heads / kv_heads). Sq may be below Skv: the
queries are the last Sq positions (a prefill after a cached prefix, a decode step), so when causal query i sees keys
0 .. i + Skv - Sq. With a fourth input, an int32 tensor of one element the GPU holds (a cache's length, moved by a
state's count), only keys [0, length) are there, and the queries are the last Sq of those (a decode step over a
growing cache: no new plan or compile as it grows); a length below Sq or past Skv faults (BAD_INDEX). Tensor cores for bf16/fp16 (attention_tile), a scalar tile for fp32 (attention_tile_scalar);
queries per tile (bq) chosen to fill the SMs."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ark_runtime.graph import ModelError, Op, Tensor
from ark_runtime.ops.spec import BadIndex, Built, OpSpec, no_attrs, require_float, same_dtype
from ark_runtime.tiling import Region, chunks

ATTENTION_BLOCKS = (64, 32, 16)  # queries per attention tile, most first (attention.cuh: 16-row groups)
MAX_HEAD_DIM = 256
WARPS, KB = 8, 32  # attention.cuh
ATT_STAGE_BUDGET = 80 * 1024  # attention.cuh: bytes for the stages of K and V in flight


def attention_block(seq: int, d: int, heads: int, num_sms: int) -> int:
    """Queries per attention tile: 64, halved while the tiles (heads x batch x query blocks, `heads` counting
    both) do not fill the SMs or the block is twice the (16-rounded) sequence or more; 16 at the least, 32 for
    head dimensions above 128 (attention.cuh's 16-query tile would need 135 KiB of shared memory there)."""
    least = 16 if -(-d // 16) * 16 <= 128 else 32
    bq = ATTENTION_BLOCKS[0]
    while bq > least and (heads * -(-seq // bq) < num_sms or bq >= 2 * -(-seq // 16) * 16):
        bq //= 2
    return bq


@dataclass(frozen=True)
class AttentionShape:
    """attention.cuh's AttnShape<D, BQ>: the tensor-core tile's constants for head dimension d and bq queries."""

    d: int
    bq: int

    @property
    def dp(self) -> int:  # head dimension padded to the MMA's k
        return -(-self.d // 16) * 16

    @property
    def ld(self) -> int:  # shared-memory row stride, elements
        return self.dp + 8

    @property
    def splits(self) -> int:  # key splits: 8 warps over bq / 16 query groups
        return WARPS // (self.bq // 16)

    @property
    def kw(self) -> int:  # keys per warp per stage
        return 32 if 2 * 2 * 32 * self.splits * self.ld * 2 <= ATT_STAGE_BUDGET else 16

    @property
    def stages(self) -> int:  # stages of K and V in flight
        return 2 if 2 * (2 * self.kw * self.splits * self.ld * 2) <= ATT_STAGE_BUDGET else 1

    @property
    def smem(self) -> int:
        stage = 2 * self.kw * self.splits * self.ld * 2
        dc = min(self.dp, 128)
        merge = WARPS * 16 * (dc + 8 + 2) * 4
        return self.bq * self.ld * 2 + max(self.stages * stage, merge)


def attention_smem(dtype: str, d: int, bq: int) -> int:
    """Shared memory of an attention tile: the tensor-core tile's (bf16, fp16), or the scalar fp32 tile's."""
    if dtype == "fp32":
        return (2 * KB * (d + 1) + WARPS * d) * 4
    return AttentionShape(d, bq).smem


def reference_attention(q, k, v, heads: int, causal: bool, kv_heads: int | None = None, length=None):
    """Per head, each query over keys 0..i + Skv - Sq (causal) or all: only those key and value rows are touched.
    `length` (keys there, at most Skv) in place of Skv, where given."""
    kv_heads = kv_heads or heads
    sq, e = q.shape[-2], q.shape[-1]
    skv = k.shape[-2] if length is None else int(length)
    d, group, off = e // heads, heads // kv_heads, skv - sq
    q2 = q.reshape(-1, sq, e)
    k2, v2 = (t.reshape(-1, k.shape[-2], kv_heads * d) for t in (k, v))
    out = np.empty_like(q2)
    for b in range(q2.shape[0]):
        for h in range(heads):
            cols, kv_cols = slice(h * d, (h + 1) * d), slice(h // group * d, (h // group + 1) * d)
            for i in range(sq):
                n = i + 1 + off if causal else skv
                scores = k2[b, :n, kv_cols] @ q2[b, i, cols] / math.sqrt(d)
                w = np.exp(scores - scores.max())
                out[b, i, cols] = (w / w.sum()) @ v2[b, :n, kv_cols]
    return out.reshape(q.shape)


class Attention(OpSpec):
    kind = "attention"

    def build(self, fn: str, inputs: tuple[Tensor, ...], attrs: dict) -> Built:
        if len(inputs) not in (3, 4):
            raise ModelError(f"attention takes q, k, v and perhaps a length tensor, not {len(inputs)} tensors")
        no_attrs("attention", attrs, ("heads", "kv_heads", "causal"))
        q, k, v = inputs[:3]
        batches = q.rows // q.shape[-2] if len(q.shape) >= 2 else 1
        if len(inputs) == 4 and (inputs[3].dtype != "int32" or inputs[3].elements not in (1, batches)):
            raise ModelError(f"attention: the length {inputs[3].name} must be an int32 tensor of one element, or of "
                             f"one per sequence ({batches}), not {inputs[3].dtype} {inputs[3].shape}")
        require_float("attention", q)
        same_dtype("attention", q, k)
        same_dtype("attention", q, v)
        heads = attrs.get("heads")
        if len(q.shape) < 2 or isinstance(heads, bool) or not isinstance(heads, int) or heads < 1 \
                or q.shape[-1] % heads:
            raise ModelError(f"attention: q must be [..., S, heads * D] and heads={heads!r} a positive int dividing "
                             f"its last axis ({q.shape})")
        kv_heads = attrs.get("kv_heads", heads)
        if isinstance(kv_heads, bool) or not isinstance(kv_heads, int) or kv_heads < 1 or heads % kv_heads:
            raise ModelError(f"attention: kv_heads={kv_heads!r} must be a positive int dividing heads={heads}")
        d = q.shape[-1] // heads
        want = q.shape[:-2] + ("Skv", kv_heads * d)
        if k.shape != v.shape or len(k.shape) != len(q.shape) or k.shape[:-2] != q.shape[:-2] \
                or k.shape[-1] != kv_heads * d:
            raise ModelError(f"attention: k and v must both be {list(want)} for q {q.shape} with {heads} heads of "
                             f"{d} and {kv_heads} key/value heads, not {k.shape} and {v.shape}")
        causal = bool(attrs.get("causal", True))
        if causal and q.shape[-2] > k.shape[-2]:
            raise ModelError(f"attention: causal with {q.shape[-2]} queries but {k.shape[-2]} keys; the queries are the "
                             "last positions of the keys, so there can be no more of them")
        if d > MAX_HEAD_DIM:
            raise ModelError(f"attention: head dimension {d} is above the kernel's {MAX_HEAD_DIM}; use more heads")
        extra = {"kv_heads": kv_heads} if kv_heads != heads else {}
        return Built(q.shape, q.dtype, {"heads": heads, "causal": causal, **extra})

    def reference(self, op: Op, args: list[np.ndarray]) -> np.ndarray:
        kw = dict(heads=op.attr("heads"), causal=op.attr("causal", True), kv_heads=op.attr("kv_heads"))
        if len(args) < 4:
            return reference_attention(*args, **kw)
        q, k, v = (np.asarray(a) for a in args[:3])
        lengths = np.asarray(args[3], np.float64).reshape(-1)
        if np.isnan(lengths).any():  # not yet written (reference.run_plan)
            return np.full(q.shape, np.nan)
        sq, skv = q.shape[-2], k.shape[-2]
        for length in lengths:
            if length != int(length) or not sq <= length <= skv:
                raise BadIndex(f"attention (op {op.id}): length {length:g} is not in {sq}..{skv} (its queries to "
                               "its keys)")
        q3, k3, v3 = q.reshape(-1, sq, q.shape[-1]), k.reshape(-1, skv, k.shape[-1]), v.reshape(-1, skv, v.shape[-1])
        out = np.stack([reference_attention(q3[b], k3[b], v3[b], length=lengths[b if lengths.size > 1 else 0], **kw)
                        for b in range(q3.shape[0])])
        return out.reshape(q.shape)

    def bad_index(self, op: Op, detail: int) -> str:
        return (f"its length, {detail - 1}, is not between its queries and its keys" if detail else
                "its length is below 0")

    def variant(self, model, op: Op, device) -> dict:
        q = model.tensors[op.inputs[0]]
        s, e, heads = q.shape[-2], q.shape[-1], op.attr("heads")
        d = e // heads
        bq = attention_block(s, d, heads * (q.rows // s), device.num_sms)
        return {"template": "attention_tile_scalar" if q.dtype == "fp32" else "attention_tile", "head_dim": d,
                "queries": bq, "smem": attention_smem(q.dtype, d, bq)}

    def tiles(self, tm, op: Op, v: dict) -> None:
        q, k, val = tm.ins[:3]
        length = tm.ins[3] if len(tm.ins) == 4 else None  # keys known at run time only: a tile reads all of them
        s, skv = q.shape[-2], k.shape[-2]
        heads, causal, d, bq = op.attr("heads"), op.attr("causal", True), v["head_dim"], v["queries"]
        group, off = heads // (op.attr("kv_heads") or heads), skv - s
        # causal: the query blocks with the most keys first, across every head and sequence, so that the schedule
        # (list scheduling in tile order) deals the longest tiles out first and fills in with the short ones
        blocks = chunks(s, bq)
        for q0, q1 in (reversed(blocks) if causal else blocks):
            for b in range(q.rows // s):
                for h in range(heads):
                    kv_end = q1 + off if causal and length is None else skv
                    base, base_kv, c0, c1 = b * s, b * skv, h * d, (h + 1) * d
                    k0, k1 = h // group * d, (h // group + 1) * d
                    reads = [Region(q.id, base + q0, base + q1, c0, c1),
                             Region(k.id, base_kv, base_kv + kv_end, k0, k1),
                             Region(val.id, base_kv, base_kv + kv_end, k0, k1)]
                    if length is not None:
                        reads.append(Region.whole(length))
                    tm.add(base + q0, base + q1, c0, c1, reads, ((q1 - q0) * 2 + 2 * kv_end) * d * tm.esize,
                           4 * (q1 - q0) * kv_end * d)

    def emit(self, e, op: Op, v: dict) -> str:
        out, q, k = e.tensor(op.output), e.tensor(op.inputs[0]), e.tensor(op.inputs[1])
        seq, width, d, bq, smem = q.shape[-2], q.shape[-1], v["head_dim"], v["queries"], v["smem"]
        seq_kv, width_kv = k.shape[-2], k.shape[-1]
        group = op.attr("heads") // (op.attr("kv_heads") or op.attr("heads"))
        ct = e.ctype(out)
        x = [e.ptr(i) for i in op.inputs]
        o = e.ptr(out.id, const=False)
        causal = "true" if op.attr("causal", True) else "false"
        # the tile's (batch) first row and its first key row; its queries from there; its key/value head's columns
        base = (f"const int base = r0 / {seq} * {seq}, base_kv = r0 / {seq} * {seq_kv}, "
                f"col0_kv = c0 / {d} / {group} * {d};")
        kv = f"base_kv, r0 - base, r1 - base, c0, col0_kv, {seq_kv - seq}"
        keys = str(seq_kv)
        if len(op.inputs) == 4:  # the keys there, read at run time: the queries are the last of them
            each = " + r0 / " + str(seq) if e.tensor(op.inputs[3]).elements > 1 else ""
            base += (f" const int keys = *((const volatile int*)T[{op.inputs[3]}]{each});\n"
                     f"      if (keys < {seq} || keys > {seq_kv}) "
                     "return ((unsigned long long)ark::FAULT_BAD_INDEX << 32) | (unsigned)(keys < 0 ? 0 : keys + 1);")
            kv = f"base_kv, r0 - base, r1 - base, c0, col0_kv, keys - {seq}"
            keys = "keys"
        if out.dtype == "fp32":  # the scalar tile
            e.need_smem(smem, f"static_assert(ark::attention_scalar_smem<{d}>() == {smem}, \"attention.py's "
                              "attention_smem\");")
            return (f"{{ {base} ark::attention_tile_scalar<{ct}, {d}, {causal}>({x[0]}, {x[1]}, {x[2]}, {o}, {keys}, "
                    f"{width}, {width_kv}, base, {kv}, smem); }}")
        e.need_smem(smem, f"static_assert(ark::attention_smem<{ct}, {d}, {bq}>() == {smem}, \"attention.py's "
                          "attention_smem\");")
        vec = "true" if d % 8 == 0 else "false"  # 16-byte pieces of each head's rows (E = heads x d)
        return (f"{{ {base} ark::attention_tile<{ct}, {d}, {bq}, {causal}, {vec}, {width}, {width_kv}>({x[0]}, {x[1]}, "
                f"{x[2]}, {o}, {keys}, base, {kv}, smem); }}")


SPEC = Attention()
