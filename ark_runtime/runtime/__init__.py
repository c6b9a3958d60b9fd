"""The loop-kernel runtime: a model launched once as one resident kernel (one CTA per SM), run again and again by
raising a word in mapped memory, with no kernel launch per run.

    with Runtime(model) as rt:
        rt.set("x", x)            # or Runtime(model, bind={"x": cupy_array_or_torch_tensor}): no copy
        rt.run(10)                # ten iterations, queued to the resident kernel
        rt.wait()                 # LoopFault / LoopTimeout instead of a hang
        y = rt.get("out")         # NumPy (float32 for bf16)

States: launched -> (run / wait / suspend)* -> stopped; a fault or a timeout stops the kernel, the GPU stays usable,
and the Runtime refuses further runs.

How go and done travel (go.py, control.py). run() raises `go` (iterations asked for, in all) in the control block,
pinned host memory mapped for the GPU. Where the GPU can, the write is a stream memory operation on the runtime's go
stream, which first waits for the caller's current CuPy stream (and PyTorch's once PyTorch has initialized CUDA):
inputs written by kernels queued there are in place before the resident kernel reads them, and the host does not
block; when those streams and the go stream are all idle the host writes `go` itself, which is quicker. Where the GPU
cannot, the host synchronizes those streams and writes `go` (`Runtime.go_path` says which; ARK_GO_PATH=stream or
host forces one). The kernel publishes `done` as each iteration ends (ARK_PUBLISH_EVERY=N builds it to publish
every Nth). wait() spins on `done` for the first couple of milliseconds, then yields the core, then sleeps.

Ctrl-C and exit (resident.py). A KeyboardInterrupt inside run(), wait(), stop() or suspend() halts the kernel at once
(its stop word; queued iterations are dropped; the host waits at most INTERRUPT_GRACE_S for it to leave), marks the
Runtime stopped and goes on as the KeyboardInterrupt. So does leaving a `with` block on any exception. A Runtime
collected while its kernel runs, and every kernel resident at interpreter exit, is halted the same way (at exit
before CuPy's and PyTorch's own exit handlers); a kernel that does not leave in time is left to the CUDA context's
teardown. stop() finishes the queued iterations first (bounded by its timeout); stop(drain=False) does not.

Other CUDA work while the kernel is resident. CUDA calls that wait for the whole device wait for the resident kernel,
and so never return: allocating or freeing GPU or pinned memory (cudaMalloc, cudaFree, cudaHostAlloc; a CuPy or
PyTorch expression that needs a new buffer from its pool) and loading a module, which includes a kernel's first
launch (lazy loading). Three ways to live with it: allocate, and launch once, what a program needs while the kernel
runs before the Runtime starts, and read results with copies (get(), .get(), .cpu()); or step the kernel aside with

    with rt.suspend():            # waits for the queued iterations, halts the kernel
        z = cupy.zeros(n)         # any CUDA work
    rt.run()                      # the same kernel again: same memory, plan and counters, iterations counting on

(relaunching costs a kernel launch and the kernel's start, not a compile); or stop() first. One Runtime per process
runs at a time for the same reason. A kernel already loaded runs on another stream while the loop kernel is resident:
the loop kernel uses no local memory (its arguments are __grid_constant__), and on the H100 we measured no other
kernel started while one that does was resident.

The parts: runtime.py (Runtime), control.py (the control block, waiting for done), go.py (writing go), resident.py
(the launched kernel, halting it, exit), copy_paths.py (each copy's path, the DMA engine), graph_copies.py (device
graphs of graph copies, the gate, the kernel inside a graph), faults.py (the exceptions, fault records as
messages), tensors.py (bound and allocated tensor memory).
"""

from ark_runtime.runtime.copy_paths import (COPY_PATHS, DMA_ENGINES, GRAPH_LAUNCHES_PER_RUN, SM_COPY_MAX,
                                            graph_copies_unavailable)
from ark_runtime.runtime.faults import LoopError, LoopFault, LoopTimeout
from ark_runtime.runtime.runtime import Runtime, TransferReport
from ark_runtime.runtime.tensors import TENSOR_ALIGN

__all__ = ["COPY_PATHS", "DMA_ENGINES", "GRAPH_LAUNCHES_PER_RUN", "SM_COPY_MAX", "TENSOR_ALIGN", "LoopError",
           "LoopFault", "LoopTimeout", "Runtime", "TransferReport", "graph_copies_unavailable"]
