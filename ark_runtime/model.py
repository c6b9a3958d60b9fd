"""The model API: tensors and the ops between them, built as a graph with shapes checked as each op is added.

    m = Model("mlp")
    x = m.input("x", (8, 4096), "bf16")
    w1, w2 = m.input("w1", (4096, 16384), "bf16"), m.input("w2", (16384, 4096), "bf16")
    m.output(m.matmul(m.gelu(m.matmul(x, w1)), w2))

Every op makes a new tensor (the graph is single-assignment), so the plan (ark_runtime/plan.py) can tell
who writes and who reads each byte. Each op kind's shape check is its spec's (ark_runtime/ops/<kind>.py): `op`
reaches any kind, and the methods below name the common ones. Shapes broadcast as in NumPy; a bad shape, dtype or
argument raises ModelError naming the op and what to change. `check()` says what a model that was edited by hand
(or built elsewhere) breaks: `lower` calls it before every pass.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ark_runtime.graph import (DTYPE_BYTES, FLOAT_DTYPES, MAX_EXTENT, MAX_WORLD, PLACEMENTS, ModelError, Op,  # noqa: F401
                               Tensor, broadcast)

__all__ = ["DTYPE_BYTES", "FLOAT_DTYPES", "MAX_EXTENT", "PLACEMENTS", "Model", "ModelError", "Op", "Tensor", "broadcast"]


@dataclass
class Model:
    name: str = "model"
    tensors: list[Tensor] = field(default_factory=list)
    ops: list[Op] = field(default_factory=list)
    outputs: list[int] = field(default_factory=list)
    states: list[int] = field(default_factory=list)  # inputs the kernel keeps and updates across iterations
    rank: int = 0  # which GPU of `world` this model runs on (its communication ops name peers by rank)
    world: int = 1  # GPUs the program spans: one model per rank, lowered together (ark_runtime/world.py)

    def __post_init__(self) -> None:
        if isinstance(self.world, bool) or not isinstance(self.world, int) or not 1 <= self.world <= MAX_WORLD:
            raise ModelError(f"model {self.name!r}: world={self.world!r} must be an int in 1..{MAX_WORLD} (the GPUs "
                             "the program spans)")
        if isinstance(self.rank, bool) or not isinstance(self.rank, int) or not 0 <= self.rank < self.world:
            raise ModelError(f"model {self.name!r}: rank={self.rank!r} must be an int in 0..{self.world - 1} (this "
                             f"model's GPU of the {self.world})")

    # --- tensors ----------------------------------------------------------------------------------
    def input(self, name: str, shape, dtype: str = "fp32", placement: str = "device") -> Tensor:
        if not isinstance(name, str) or not name.isidentifier():
            raise ModelError(f"tensor name {name!r} must be an identifier")
        if any(t.name == name for t in self.tensors):
            raise ModelError(f"tensor name {name!r} is already taken")
        return self._tensor(name, shape, dtype, placement, None)

    def state(self, name: str, shape, dtype: str = "fp32", placement: str = "device") -> Tensor:
        """A tensor the kernel keeps from one iteration to the next (a KV cache, a position): an input the model's
        `write` and `count` ops update in place (zeros unless bound or set). Reading it sees what the ops before
        the read wrote in this iteration, and what the ops after it wrote in the iteration before. Placed on the
        host (pinned memory the kernel writes across PCIe), it is what `Runtime.stream` hands out as it fills."""
        t = self.input(name, shape, dtype, placement)
        self.states.append(t.id)
        return t

    def _tensor(self, name, shape, dtype, placement, producer, alias=None) -> Tensor:
        try:
            shape = tuple(shape)
        except TypeError:
            raise ModelError(f"tensor {name}: shape {shape!r} must be a sequence of positive ints") from None
        if not shape or any(isinstance(s, bool) or not isinstance(s, int) or s <= 0 for s in shape):
            raise ModelError(f"tensor {name}: shape {shape!r} must be one or more positive ints")
        t = Tensor(len(self.tensors), name, shape, dtype, placement, producer, alias)
        if t.rows >= MAX_EXTENT or t.cols >= MAX_EXTENT:
            raise ModelError(f"tensor {name}: shape {shape} folds to {t.rows:,} rows (every axis but the last) by "
                             f"{t.cols:,} columns; the kernels index each with 32-bit ints, so both must be below "
                             "2**31: reshape it")
        if dtype not in DTYPE_BYTES:
            raise ModelError(f"tensor {name}: dtype {dtype!r} is not one of {', '.join(DTYPE_BYTES)}")
        if placement not in PLACEMENTS:
            raise ModelError(f"tensor {name}: placement {placement!r} is not one of {', '.join(PLACEMENTS)}")
        self.tensors.append(t)
        return t

    def _own(self, op: str, *ts: Tensor) -> None:
        for t in ts:
            if not isinstance(t, Tensor) or t.id >= len(self.tensors) or self.tensors[t.id] is not t:
                raise ModelError(f"{op}: {t!r} is not a tensor of model {self.name!r}")

    def _fresh_name(self, base: str) -> str:
        """`base` with the op's number, made unique: an input may already hold the name an op would take."""
        taken = {t.name for t in self.tensors}
        name, k = f"{base}{len(self.ops)}", 1
        while name in taken:
            name, k = f"{base}{len(self.ops)}_{k}", k + 1
        return name

    def op(self, kind: str, *inputs: Tensor, fn: str | None = None, **attrs) -> Tensor:
        """An op of any kind the runtime has (ark_runtime/ops/), its shape checked by the kind's spec."""
        from ark_runtime.ops import spec

        found = spec(kind)
        fn = kind if fn is None else fn
        if found.written_by_passes:
            raise ModelError(f"{kind} ops are made by the lowering passes (fusion, split-K), not by the model API")
        self._own(fn, *inputs)
        if found.needs_world:  # its shapes and peers are the world's: the op keeps which rank of how many it is on
            if self.world == 1:
                raise ModelError(f"{fn}: model {self.name!r} is of one GPU; a model that communicates is one rank of "
                                 "a world: Model(name, rank=r, world=n)")
            if "rank" in attrs or "world" in attrs:
                raise ModelError(f"{fn}: rank and world are the model's (Model(name, rank=, world=)), not the op's")
            attrs = {**attrs, "rank": self.rank, "world": self.world}
        built = found.build(fn, tuple(inputs), dict(attrs))
        alias = None
        if built.writes_in_place is not None:
            target = inputs[built.writes_in_place]
            alias = target.root
            if alias not in self.states:
                raise ModelError(f"{fn}: {target.name} is not a state of model {self.name!r}; only a state "
                                 "(m.state(...)) is written in place")
        out = self._tensor(self._fresh_name(fn), built.shape, built.dtype, built.placement, len(self.ops), alias)
        self.ops.append(Op(len(self.ops), kind, fn, tuple(t.id for t in inputs), out.id,
                           tuple(sorted(built.attrs.items()))))
        return out

    def output(self, *ts: Tensor) -> None:
        self._own("output", *ts)
        for t in ts:
            if t.producer is None:
                raise ModelError(f"output: {t.name} is an input of model {self.name!r}; an output is what an op "
                                 "computes (copy it with an op, e.g. m.unary('identity', x), to return it)")
        self.outputs.extend(t.id for t in ts if t.id not in self.outputs)

    # --- the common ops by name ---------------------------------------------------------------------
    def unary(self, fn: str, x: Tensor) -> Tensor:
        return self.op("unary", x, fn=fn)

    def gelu(self, x: Tensor) -> Tensor:
        return self.unary("gelu", x)

    def silu(self, x: Tensor) -> Tensor:
        return self.unary("silu", x)

    def binary(self, fn: str, a: Tensor, b: Tensor) -> Tensor:
        return self.op("binary", a, b, fn=fn)

    def add(self, a: Tensor, b: Tensor) -> Tensor:
        return self.binary("add", a, b)

    def mul(self, a: Tensor, b: Tensor) -> Tensor:
        return self.binary("mul", a, b)

    def reduce(self, fn: str, x: Tensor) -> Tensor:
        """Over the last axis, kept as an axis of 1."""
        return self.op("reduce", x, fn=fn)

    def softmax(self, x: Tensor) -> Tensor:
        return self.op("softmax", x)

    def layernorm(self, x: Tensor, weight: Tensor, bias: Tensor, eps: float = 1e-5) -> Tensor:
        return self.op("layernorm", x, weight, bias, eps=eps)

    def rmsnorm(self, x: Tensor, weight: Tensor, eps: float = 1e-6) -> Tensor:
        return self.op("rmsnorm", x, weight, eps=eps)

    def matmul(self, a: Tensor, b: Tensor) -> Tensor:
        """a [..., M, K] @ b [K, N] -> [..., M, N], fp32 accumulation."""
        return self.op("matmul", a, b)

    def attention(self, q: Tensor, k: Tensor, v: Tensor, heads: int, causal: bool = True,
                  kv_heads: int | None = None) -> Tensor:
        """softmax(q k^T / sqrt(D)) v per head (flash-style), causal by default. q is [..., Sq, heads * D], k and v
        [..., Skv, kv_heads * D] (kv_heads, default heads, divides heads: grouped-query attention), as the
        projections make them; with Sq < Skv the queries are the last Sq positions. The result is q's shape."""
        return self.op("attention", q, k, v, heads=heads, causal=causal, **({} if kv_heads is None else {"kv_heads": kv_heads}))

    def rope(self, x: Tensor, cos: Tensor, sin: Tensor, style: str = "interleaved",
             head_dim: int | None = None) -> Tensor:
        """Rotary embedding of x [..., S, heads * head_dim] with cos/sin [S, head_dim / 2] (head_dim: x's last axis
        unless given), columns (2j, 2j+1) of each head turned together, or (j, j + head_dim/2) with style="half"
        (Hugging Face's rotate_half)."""
        return self.op("rope", x, cos, sin, style=style, head_dim=head_dim)

    def embedding(self, table: Tensor, ids: Tensor) -> Tensor:
        """Rows of table [V, D] picked by ids [...] (int32) -> [..., D]."""
        return self.op("embedding", table, ids)

    def cast(self, x: Tensor, dtype: str) -> Tensor:
        """x as `dtype` (fp32, fp16, bf16), from a float or int32, each value rounded to nearest even."""
        return self.op("cast", x, dtype=dtype)

    def transpose(self, x: Tensor) -> Tensor:
        """x [..., A, B] -> [..., B, A], a new tensor (tied embeddings: h @ m.transpose(table))."""
        return self.op("transpose", x)

    def argmax(self, x: Tensor) -> Tensor:
        """The index of the largest element over the last axis, int32 [..., 1]: the lowest index among equals, the
        first NaN where a row has one (NumPy's argmax)."""
        return self.op("argmax", x)

    def sample(self, logits: Tensor, step: Tensor, *, seed: int, temperature: float = 1.0, top_k: int = 0,
               top_p: float = 1.0) -> Tensor:
        """One column drawn per row of `logits`, int32 [..., 1] like argmax: from softmax(logits / temperature) cut
        to the top_k largest (0: all), then to the smallest set of those whose probability reaches top_p (ties to
        the lower column), renormalized. The random number of row r comes from (seed, step[r] or step[0], r):
        `step` an int32 tensor of one element or one per row that the GPU holds (a decode position), so each
        iteration draws afresh. temperature=0 is greedy (the argmax). See ark_runtime/ops/sample.py."""
        return self.op("sample", logits, step, seed=seed, temperature=temperature, top_k=top_k, top_p=top_p)

    def slice(self, x: Tensor, start: int, stop: int) -> Tensor:
        """Columns [start, stop) of x's last axis, a new tensor [..., stop - start]."""
        return self.op("slice", x, start=start, stop=stop)

    def concat(self, a: Tensor, b: Tensor) -> Tensor:
        """a [..., Da] and b [..., Db] joined along the last axis -> [..., Da + Db], a new tensor."""
        return self.op("concat", a, b)

    def copy(self, x: Tensor, placement: str = "host") -> Tensor:
        """x copied to `placement` ("host": pinned host memory), by DMA from inside the running kernel."""
        return self.op("copy", x, placement=placement)

    # --- the whole graph ------------------------------------------------------------------------------
    def check(self) -> None:
        """ModelError naming what is wrong with the graph as it stands: no ops or no outputs, tensors or ops out of
        order or pointing nowhere, two tensors of one name, an op that reads its own output or a later op's (a cycle),
        an output that is an input."""
        from ark_runtime.graph_check import problems

        found = problems(self)
        if found:
            raise ModelError(f"model {self.name!r}: " + "; ".join(found[:6])
                             + (f" (and {len(found) - 6} more)" if len(found) > 6 else ""))

    def write(self, state: Tensor, value: Tensor, row=0, stride: int | None = None) -> Tensor:
        """`value`'s rows into rows [row, row + value's rows) of `state` (both in their 2-D views, the same columns),
        in place; `row` an int or an int32 tensor of one element the GPU holds (a position that moves). With
        `stride`, `row` an int32 tensor of one element per value row: value row i into state row
        i * stride + row[i] (a batch of sequences, each its own block of `stride` rows, each at its own position).
        Returns the state as written, for the ops that read it after."""
        if isinstance(row, Tensor):
            return self.op("write", state, value, row, **({} if stride is None else {"stride": stride}))
        if stride is not None:
            raise ModelError(f"write: stride={stride!r} goes with a row tensor of one element per value row, not "
                             f"row={row!r}")
        return self.op("write", state, value, row=row)

    def count(self, state: Tensor, by: int = 1) -> Tensor:
        """An int32 state raised by `by` in place, every element (a position, a step, a position per sequence):
        returns it as raised."""
        return self.op("count", state, by=by)

    # --- communication (a model of a World: rank and world set) --------------------------------------------
    def send(self, x: Tensor, peer: int, tag: int = 0) -> Tensor:
        """x to GPU `peer`, whose model receives it with recv(x's shape and dtype, this rank, tag): the i-th send
        to a peer with a tag is its i-th recv from this rank with that tag. The bytes land in the peer's memory
        with their flag (put with signal), each iteration after the peer has read the last. Returns a tensor that
        names the sent message (it is the peer's: nothing on this rank reads it)."""
        return self.op("send", x, peer=peer, tag=tag)

    def recv(self, shape, dtype: str, peer: int, tag: int = 0) -> Tensor:
        """What GPU `peer` sends this rank with `tag` (its matching send): a tensor of this rank's memory that
        ops read as any other, each tile after the rows it reads have landed."""
        return self.op("recv", shape=tuple(shape) if isinstance(shape, (list, tuple)) else shape, dtype=dtype,
                       peer=peer, tag=tag)

    def all_reduce(self, x: Tensor, algorithm: str = "auto") -> Tensor:
        """The sum of every rank's x, on every rank (each rank's model calls it in the same order, with x of one
        shape and dtype). `algorithm`: "one_shot" (each rank reads every peer's x), "two_shot" (each rank sums
        its share of the rows, then gathers the others'), or "auto" (world.ALL_REDUCE_ONE_SHOT_BYTES)."""
        return self.op("all_reduce", x, algorithm=algorithm)

    def all_gather(self, x: Tensor) -> Tensor:
        """Every rank's x, stacked along the first axis in rank order: [world * x.shape[0], ...]."""
        return self.op("all_gather", x)

    def reduce_scatter(self, x: Tensor) -> Tensor:
        """This rank's share of the sum of every rank's x: rows [rank * n, (rank + 1) * n) of the first axis,
        n = x.shape[0] / world."""
        return self.op("reduce_scatter", x)

    def as_json(self) -> dict:
        out = {"name": self.name, "tensors": [t.as_json() for t in self.tensors],
               "ops": [o.as_json() for o in self.ops], "outputs": list(self.outputs)}
        if self.states:
            out["states"] = list(self.states)
        if self.world > 1:
            out["rank"], out["world"] = self.rank, self.world
        return out

