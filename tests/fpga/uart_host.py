"""A host's serial port in amaranth.sim: a UART pair wired to a design's rx/tx, with send and receive helpers."""

from __future__ import annotations

from amaranth import Module

from fpga.link.bridge_protocol import Reply, parse_reply, read_frame, write_frame
from fpga.cores.uart import UARTRx, UARTTx


class UARTHost:
    """Add to `m` beside the design; connects to the design's `rx`/`tx` signals."""

    def __init__(self, m: Module, divisor: int, design_rx, design_tx):
        self.divisor = divisor
        m.submodules.host_tx = self.tx = UARTTx(divisor)
        m.submodules.host_rx = self.rx = UARTRx(divisor)
        m.d.comb += [design_rx.eq(self.tx.tx), self.rx.rx.eq(design_tx)]

    async def send(self, ctx, data: bytes) -> None:
        for byte in data:
            ctx.set(self.tx.data.payload, byte)
            ctx.set(self.tx.data.valid, 1)
            await ctx.tick().until(self.tx.data.ready)
        ctx.set(self.tx.data.valid, 0)

    async def receive(self, ctx, count: int, max_bytes_time: int = 40) -> bytes:
        """`count` bytes, or fewer if the line stays quiet for `max_bytes_time` byte times."""
        out = bytearray()
        ctx.set(self.rx.data.ready, 1)
        quiet = 0
        while len(out) < count and quiet < max_bytes_time * 10 * self.divisor:
            await ctx.tick()
            if ctx.get(self.rx.data.valid):
                out.append(ctx.get(self.rx.data.payload))
                quiet = 0
            else:
                quiet += 1
        return bytes(out)

    async def write(self, ctx, addr: int, data: int) -> Reply:
        await self.send(ctx, write_frame(addr, data))
        return parse_reply(await self.receive(ctx, 1), read=False)

    async def read(self, ctx, addr: int) -> Reply:
        await self.send(ctx, read_frame(addr))
        return parse_reply(await self.receive(ctx, 5), read=True)
