"""Stream helpers for block tests in amaranth.sim (the Glasgow manner): put a payload into a stream, get one
out, each waiting for the handshake, with optional random idle or backpressure."""

from __future__ import annotations

import random


async def stream_put(ctx, stream, payload, rng: random.Random | None = None, idle: float = 0.0) -> None:
    """Offer `payload` (an int or a dict for a struct layout) until the sink takes it."""
    while rng is not None and rng.random() < idle:
        await ctx.tick()
    ctx.set(stream.valid, 1)
    ctx.set(stream.payload, payload)
    await ctx.tick().until(stream.ready)
    ctx.set(stream.valid, 0)


async def stream_get(ctx, stream, rng: random.Random | None = None, stall: float = 0.0):
    """Take one payload from `stream` (with random backpressure); the payload as the simulator reads it."""
    while rng is not None and rng.random() < stall:
        await ctx.tick()
    ctx.set(stream.ready, 1)
    (payload,) = await ctx.tick().sample(stream.payload).until(stream.valid)
    ctx.set(stream.ready, 0)
    return payload
