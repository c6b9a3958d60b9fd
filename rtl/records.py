"""The records that flow between the engine's stages (picks, jobs, write entries, completion entries) and the
signatures of the interfaces that join its blocks."""

from __future__ import annotations

from amaranth import Value
from amaranth.lib import data, enum, stream, wiring
from amaranth.lib.wiring import In, Out

from rtl.abi_layouts import DescriptorLayout
from rtl.params import index_bits

CODE_BITS = 4  # ErrorCode values fit in 4 bits (the registers give them 8)
INDEX_BITS = 32  # producer indices are reported by their low 32 bits


class JobKind(enum.Enum, shape=2):
    COPY = 0  # read the source, write the destination
    IMM = 1  # write the 64-bit value carried in src_addr
    ERROR = 2  # the queue halts here with `code` (validation or doorbell error)
    DROP = 3  # the queue stopped before this one ran: retire it, move nothing


class WKind(enum.Enum, shape=2):
    BURST = 0  # one write burst of a copy: its beats come from the buffer, realigned
    IMM = 1  # one beat carrying the immediate value
    DISCARD = 2  # free the rest of a descriptor's buffer rows without writing them


def pick_layout(queue_bits: int) -> data.StructLayout:
    """What the scheduler hands the validator: a queue's next slot, or its pending doorbell error."""
    return data.StructLayout({
        "queue": queue_bits,
        "index": INDEX_BITS,
        "token": 1,  # a doorbell error instead of a descriptor
        "code": CODE_BITS,
    })


def job_layout(queue_bits: int, row_ptr_width: int) -> data.StructLayout:
    """A validated descriptor (validator -> read engine -> write planner)."""
    return data.StructLayout({
        "kind": JobKind,
        "queue": queue_bits,
        "index": INDEX_BITS,
        "cookie": 32,
        "code": CODE_BITS,
        "notify": 1,
        "zero": 1,  # length == 0
        "src_addr": 64,  # bus address; for IMM, the value to write
        "dst_addr": 64,
        "length": 32,
        "row0": row_ptr_width,  # first buffer row of its source data (set by the read engine)
        "nrows": row_ptr_width,  # buffer rows its reads fill (the validator counts them; 0 past the read engine if none)
        "rbeats": 9,  # the first read burst, planned by the validator: its beats
        "rlast": 1,  # and whether it is the only one
    })


def wentry_layout(data_bytes: int, row_ptr_width: int) -> data.StructLayout:
    """One entry for the write-data generator (write planner -> write data)."""
    lanes = (data_bytes - 1).bit_length() or 1
    return data.StructLayout({
        "kind": WKind,
        "beats": 9,  # beats in this burst (1..256)
        "first": 1,  # first burst of its descriptor
        "last": 1,  # last burst of its descriptor
        "preload": 1,  # the first beat needs the first two rows: read one row ahead
        "shift": lanes,  # (source lane - destination lane) mod data bytes
        "first_lane": lanes,  # destination lane of the descriptor's first byte
        "last_lane": lanes,  # destination lane of the descriptor's last byte
        "row0": row_ptr_width,
        "nrows": row_ptr_width,
        "row_end": row_ptr_width,  # row0 + nrows
        "imm": 64,
    })


def centry_layout(queue_bits: int) -> data.StructLayout:
    """One entry for the completion unit, in issue order (write planner -> completion)."""
    return data.StructLayout({
        "burst": 1,  # a write burst was issued: wait for its response
        "marker": 1,  # the descriptor ends here: retire it
        "dropped": 1,
        "queue": queue_bits,
        "index": INDEX_BITS,
        "cookie": 32,
        "code": CODE_BITS,
        "notify": 1,
        "length": 32,
    })


class DoneKind(enum.Enum, shape=2):
    RETIRE = 0  # left the pipeline without completing (dropped)
    SUCCESS = 1
    HALT = 2  # the queue halts on this one


def done_layout(queue_bits: int) -> data.StructLayout:
    """A descriptor leaving the pipeline (completion unit -> queue table)."""
    return data.StructLayout({
        "kind": DoneKind,
        "queue": queue_bits,
        "notify": 1,
        "code": CODE_BITS,
        "cookie": 32,
        "index": INDEX_BITS,
    })


def errlog_layout() -> data.StructLayout:
    return data.StructLayout({"code": 8, "queue": 16, "cookie": 32, "index": INDEX_BITS})


def region_entry_layout() -> data.StructLayout:
    return data.StructLayout({"addr": 64, "size": 64, "perms": 2})


def stops_signature(num_queues: int) -> wiring.Signature:
    """Which queues have stopped, and from which producer index on (as the queue table shows them)."""
    return wiring.Signature({
        "halting": Out(num_queues),
        "stop_at": Out(data.ArrayLayout(INDEX_BITS, num_queues)),
        "draining": Out(num_queues),  # disabled: descriptors that have not started are dropped
        # stopped from behind the read engine (write planner, completion): every descriptor of the queue
        # not yet past the read engine comes after the stop, so the read engine needs no index compare
        "hard": Out(num_queues),
        "flush": Out(1),  # a global reset drains the pipeline: everything is dropped
    })


def dropped(stops, queue, index, started: bool) -> Value:
    """True for a descriptor that must not run: its queue stopped at an earlier index, or all are
    flushed, or (for one whose reads have not `started`) its queue is being disabled."""
    # index - stop_at > 0 as the sign of stop_at - index: no zero test after the carry chain (they differ only where
    # the two are 2^31 apart, and a queue's indices in flight are within SLOTS of its stop)
    after_stop = stops.halting.bit_select(queue, 1) & (stops.stop_at[queue] - index)[INDEX_BITS - 1]
    drop = stops.flush | after_stop
    return drop if started else drop | stops.draining.bit_select(queue, 1)


# --- side-band interfaces between blocks (each from the side that drives its valid) -------------------
def event_signature(queue_bits: int, index: bool = False) -> wiring.Signature:
    """A one-cycle event about a queue: `valid`, the queue and (with `index`) a producer index."""
    members = {"valid": Out(1), "queue": Out(queue_bits)}
    if index:
        members["index"] = Out(INDEX_BITS)
    return wiring.Signature(members)


def completion_writer_port_signature(num_queues: int) -> wiring.Signature:
    """The completion writer's port into the queue table, from the writer's side. In: which queues' words
    are due (`dirty`) or whose location must be checked after enable (`checking`), each queue's word and
    its location. Out, events: a word taken (its dirty bit clears; a bit per queue, so that a queue's clear
    waits on its own grant bit, not on the grant's index compared back), held until its write issues, the
    location check passed or failed (the table may refuse a failure this cycle: `ready`), a write issued,
    and its response back."""
    nq, queue_bits = num_queues, index_bits(num_queues)
    return wiring.Signature({
        "dirty": In(nq), "checking": In(nq),
        "word": In(data.ArrayLayout(64, nq)),  # completion word: completed | halted << 63
        "compl_region": In(data.ArrayLayout(16, nq)),
        "compl_offset": In(data.ArrayLayout(64, nq)),
        "take": Out(nq),  # one-hot, the round robin's own bits: the queue whose word is taken this cycle
        "hold": Out(event_signature(queue_bits)),
        "ok": Out(event_signature(queue_bits)),
        "fail": Out(wiring.Signature({"valid": Out(1), "queue": Out(queue_bits), "code": Out(CODE_BITS),
                                      "ready": In(1)})),
        "issue": Out(event_signature(queue_bits)),
        "ack": Out(event_signature(queue_bits)),
    })


def done_signature(queue_bits: int) -> wiring.Signature:
    """A descriptor retired by the completion unit (in issue order), as the queue table takes it."""
    return wiring.Signature({"valid": Out(1), "entry": Out(done_layout(queue_bits))})


def read_tag_signature(read_id_width: int, row_ptr_width: int) -> wiring.Signature:
    """A read burst issued (`valid` the cycle its address is taken): its ID count, first buffer row and beats,
    from the read engine to the read tracker; `free` is the count of IDs the tracker has retired."""
    return wiring.Signature({"valid": Out(1), "alloc": Out(read_id_width + 1), "base": Out(row_ptr_width),
                             "beats": Out(9), "free": In(read_id_width + 1)})


def read_fault_signature(row_ptr_width: int) -> wiring.Signature:
    """The read tracker's walk stopped at a burst answered with an error (its first row), until the
    write planner acknowledges it."""
    return wiring.Signature({"valid": Out(1), "row": Out(row_ptr_width), "ack": In(1)})


def window_read_signature(num_queues: int, slots: int) -> wiring.Signature:
    """The validator's read of one submission-window slot; the descriptor comes the cycle after `en`, and with it
    `drain`, from a register: whether its flags hold FENCE or IMM (which wait for the queue to drain)."""
    return wiring.Signature({"en": Out(1), "queue": Out(index_bits(num_queues)), "slot": Out(range(slots)),
                             "desc": In(DescriptorLayout), "drain": In(1)})


def write_address_stream() -> stream.Signature:
    """Write bursts' addresses (INCR, full-width beats; `len` is beats - 1 as on AXI)."""
    return stream.Signature(data.StructLayout({"addr": 64, "len": 8}))


def write_data_stream(data_width: int) -> stream.Signature:
    return stream.Signature(data.StructLayout({"data": data_width, "strb": data_width // 8, "last": 1}))


def write_response_stream() -> stream.Signature:
    """One AXI response code per burst, in issue order."""
    return stream.Signature(2)


def write_source_signature(data_width: int) -> wiring.Signature:
    """A writer's side of the write mux: burst addresses, their data, and the responses, each a stream."""
    return wiring.Signature({"aw": Out(write_address_stream()), "w": Out(write_data_stream(data_width)),
                             "b": In(write_response_stream())})


def table_port_signature(index_bits: int, offset_bits: int, *, read_enable: bool = False,
                         word: bool = False) -> wiring.Signature:
    """The register file's port into a per-queue or per-region table: 32-bit register writes and reads at
    (entry, offset), as the register file drives them."""
    members = {"w_valid": Out(1), "w_index": Out(index_bits), "w_offset": Out(offset_bits), "w_data": Out(32),
               "r_index": Out(index_bits), "r_offset": Out(offset_bits), "r_data": In(32)}
    if read_enable:
        members["r_en"] = Out(1)
    if word:
        members["r_word"] = In(64)  # a 64-bit register read whole (its halves latched together)
    return wiring.Signature(members)


def errlog_push_signature() -> wiring.Signature:
    return wiring.Signature({"valid": Out(1), "entry": Out(errlog_layout())})


def errlog_read_signature() -> wiring.Signature:
    """The error log's head as the register file reads and pops it, and its overflow flag, which the register
    file clears when STATUS.ERRLOG_OVERFLOW is written 1 (from the log's side)."""
    return wiring.Signature({"valid": Out(1), "head": Out(errlog_layout()), "overflow": Out(1), "pop": In(1),
                             "clear_overflow": In(1)})
