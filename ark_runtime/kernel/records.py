"""The two records the host shares with the loop kernel, as NumPy dtypes: `Control` (pinned host memory,
mapped for the GPU) and `Program` (the kernel's argument, by value). include/ark/loop.cuh declares them for
the GPU; `layout_checks()` puts a static_assert of every field's offset into each generated kernel, so the
two declarations cannot drift apart unnoticed."""

from __future__ import annotations

import numpy as np

CONTROL_DTYPE = np.dtype([
    ("go", "<u8"), ("stop", "<u8"), ("done", "<u8"),
    ("fault", "<u4"), ("fault_sm", "<u4"), ("fault_tile", "<i4"), ("fault_counter", "<i4"),
    ("fault_expected", "<u8"), ("fault_observed", "<u8"), ("fault_detail", "<u8"),
])

PROGRAM_POINTERS = ("ins", "stream_start", "members", "counters", "finished", "done_ns", "fault_flag", "tensors",
                    "tile_ns", "copies", "graphs", "graph_words")
PROGRAM_DTYPE = np.dtype([*((name, "<u8") for name in PROGRAM_POINTERS), ("budget_ns", "<u8"),
                          ("segment_iterations", "<u8"), ("control", "<u8")])


def layout_checks() -> list[str]:
    """CUDA for each generated kernel: static_asserts of the records' sizes, and `ark_layout`, a kernel writing
    every field's offset (NVRTC has no constexpr offsetof), which the runtime compares with these dtypes."""
    out, fields = [], []
    for cname, dtype in (("ark::Control", CONTROL_DTYPE), ("ark::Program", PROGRAM_DTYPE)):
        out.append(f'static_assert(sizeof({cname}) == {dtype.itemsize}, "{cname} differs from records.py");')
        fields += [(cname, name) for name in dtype.names]
    body = "\n".join(f"  out[{i}] = (unsigned long long)((const char*)&{'c' if cname == 'ark::Control' else 'p'}.{name} - "
                     f"(const char*)&{'c' if cname == 'ark::Control' else 'p'});" for i, (cname, name) in enumerate(fields))
    out.append('extern "C" __global__ void ark_layout(unsigned long long* out) {\n'
               "  ark::Control c;\n  ark::Program p;\n" + body + "\n}")
    return out


def expected_offsets() -> list[int]:
    """What ark_layout should write, in its order."""
    return [d.fields[name][1] for d in (CONTROL_DTYPE, PROGRAM_DTYPE) for name in d.names]
