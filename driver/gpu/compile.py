"""Compiling CUDA C++ that includes the arkdma headers: NVRTC through CuPy, cached by source hash.

`load()` gives a CuPy RawModule for a GPU (cached in this process and, by CuPy, on disk; the key
includes the headers' hash, so editing device.cuh never reuses a stale binary). `cubin()` and
`nvcc_cubin()` compile without a GPU (the low-level NVRTC calls and nvcc), for checks in CI.

Architecture: CuPy compiles for the current GPU's `sm_XY`. A source that holds ARCH_SPECIFIC_MARK (the loop
kernel when it uses the Hopper wgmma matmul tile) is compiled instead for the arch-specific target, `sm_90a` on a
compute capability 9.0 GPU (wgmma exists only there), by NVRTC here and loaded from the CUBIN; elsewhere it takes
CuPy's path like any other source (and its `#if` guards fall back).

Device-side launches (`cudaGraphLaunch` in device code: the loop kernel's device-graph copies) need relocatable
device code linked with the device runtime library, libcudadevrt.a: `load(..., rdc=True)` compiles a relocatable
CUBIN with NVRTC and links it with that library through the driver's linker (cuLink), for the GPU's own target
(or its arch-specific one, as above).
"""

from __future__ import annotations

import functools
import hashlib
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

from driver.errors import ArkdmaError

INCLUDE_DIR = Path(__file__).resolve().parents[1] / "include"
HEADERS = ("arkdma/abi.h", "arkdma/device.cuh")
DEFAULT_ARCH = "sm_90"
ARCH_SPECIFIC_MARK = "#define ARKDMA_ARCH_SPECIFIC 1"
ARCH_SPECIFIC = {"90": "sm_90a"}  # compute capability -> the arch-specific target a marked source is built for
STD = "--std=c++17"


class CompileError(ArkdmaError):
    """A kernel did not compile; the message holds the compiler's log."""


@functools.cache
def headers_digest() -> str:
    h = hashlib.sha256()
    for name in HEADERS:
        h.update((INCLUDE_DIR / name).read_bytes())
    return h.hexdigest()[:16]


def _keyed(source: str) -> str:
    # CuPy's disk cache keys on the source text alone: put the headers' hash into it.
    return f"// arkdma headers {headers_digest()}\n{source}"


@functools.cache
def cuda_include_dir() -> Path | None:
    """Where cuda_fp16.h, cuda_bf16.h and mma.h are for NVRTC: the nvidia-cuda-runtime wheel's include
    directory (the `gpu` extra), else the toolkit's ($CUDA_PATH, /usr/local/cuda); None when neither has them."""
    import importlib.util
    import os

    candidates = []
    spec = importlib.util.find_spec("nvidia")
    for root in (spec.submodule_search_locations or []) if spec else []:
        candidates.append(Path(root) / "cu13" / "include")
    for env in ("CUDA_PATH", "CUDA_HOME"):
        if os.environ.get(env):
            candidates.append(Path(os.environ[env]) / "include")
    candidates.append(Path("/usr/local/cuda/include"))
    needed = ("cuda_bf16.h", "mma.h", "crt/mma.h")
    return next((c for c in candidates if all((c / n).is_file() for n in needed)), None)


def options(extra: tuple[str, ...] = ()) -> tuple[str, ...]:
    cuda = cuda_include_dir()
    return (STD, f"-I{INCLUDE_DIR}", *((f"-I{cuda}",) if cuda else ()), *extra)


def cubin(source: str, arch: str = DEFAULT_ARCH, extra: tuple[str, ...] = (), name: str = "kernel.cu") -> bytes:
    """Compile with NVRTC to a CUBIN (no GPU needed); CompileError with the log on failure."""
    from cupy.cuda import nvrtc

    prog = nvrtc.createProgram(source, name, [], [])
    try:
        try:
            nvrtc.compileProgram(prog, [*options(extra), f"--gpu-architecture={arch}"])
        except nvrtc.NVRTCError as exc:
            raise CompileError(f"NVRTC could not compile {name} for {arch}:\n{nvrtc.getProgramLog(prog)}") from exc
        return nvrtc.getCUBIN(prog)
    finally:
        nvrtc.destroyProgram(prog)


def nvcc_cubin(source: str, arch: str = DEFAULT_ARCH, extra: tuple[str, ...] = ()) -> bytes:
    """Compile with nvcc to a CUBIN; CompileError when nvcc is missing or the compile fails."""
    nvcc = shutil.which("nvcc")
    if nvcc is None:
        raise CompileError("nvcc is not on PATH; install the CUDA toolkit or use cubin() (NVRTC)")
    with tempfile.TemporaryDirectory() as tmp:
        src, out = Path(tmp) / "kernel.cu", Path(tmp) / "kernel.cubin"
        src.write_text(source)
        run = subprocess.run(
            [nvcc, f"-arch={arch}", "-cubin", "-std=c++17", f"-I{INCLUDE_DIR}", *extra, str(src), "-o", str(out)],
            capture_output=True, text=True, timeout=300,
        )
        if run.returncode:
            raise CompileError(f"nvcc could not compile for {arch}:\n{run.stderr}")
        return out.read_bytes()


_modules: dict[str, object] = {}


def arch_specific(source: str, compute_capability: str) -> str | None:
    """The arch-specific target a source is compiled for on a GPU of this compute capability ("90" -> "sm_90a"),
    or None for CuPy's own choice: only sources holding ARCH_SPECIFIC_MARK ask for one."""
    return ARCH_SPECIFIC.get(str(compute_capability)) if ARCH_SPECIFIC_MARK in source else None


def _cubin_cache_dir() -> Path:
    """$ARKDMA_CUBIN_CACHE, else ~/.cache/arkdma/cubin (the temporary directory where that cannot be made)."""
    if os.environ.get("ARKDMA_CUBIN_CACHE"):
        return Path(os.environ["ARKDMA_CUBIN_CACHE"])
    root = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "arkdma" / "cubin"
    try:
        root.mkdir(parents=True, exist_ok=True)
    except OSError:
        root = Path(tempfile.gettempdir()) / "arkdma-cubin"
    return root


def _load_arch_specific(keyed: str, extra: tuple[str, ...], arch: str, cooperative: bool):
    """NVRTC to a CUBIN for `arch` (cached on disk by source, options and NVRTC version), loaded by CuPy.
    -ftz=true as CuPy compiles every other source, so the numerics do not change with the path."""
    from cupy.cuda import nvrtc

    opts = (*extra, "-ftz=true")
    key = hashlib.sha256("\0".join((keyed, *options(opts), arch, str(nvrtc.getVersion()))).encode()).hexdigest()
    return _cached_module(f"{key[:32]}.cubin", lambda: cubin(keyed, arch, opts, name="ark_kernel.cu"), cooperative)


def _cached_module(name: str, build, cooperative: bool):
    """The module of the CUBIN cached as `name`, built by `build()` (bytes) when it is not there yet; written to a
    temporary name and renamed, so a process that reads it never sees half a file."""
    import cupy

    path = _cubin_cache_dir() / name
    if not path.is_file():
        data = build()
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
        tmp.write_bytes(data)
        os.replace(tmp, path)
    module = cupy.RawModule(path=str(path), enable_cooperative_groups=cooperative)
    module.compile()
    return module


@functools.cache
def cudadevrt_path() -> Path | None:
    """libcudadevrt.a (the device runtime, for device-side launches): the nvidia-cuda-runtime wheel's, else the
    toolkit's ($CUDA_PATH, $CUDA_HOME, nvcc's, /usr/local/cuda); None when there is none."""
    import importlib.util

    candidates = []
    spec = importlib.util.find_spec("nvidia")
    for root in (spec.submodule_search_locations or []) if spec else []:
        candidates += [Path(root) / "cu13" / "lib", Path(root) / "cuda_runtime" / "lib"]
    roots = [Path(os.environ[e]) for e in ("CUDA_PATH", "CUDA_HOME") if os.environ.get(e)]
    if shutil.which("nvcc"):
        roots.append(Path(shutil.which("nvcc")).resolve().parents[1])
    roots.append(Path("/usr/local/cuda"))
    for root in roots:
        candidates += [root / "lib64", root / "lib", root / "targets" / "x86_64-linux" / "lib"]
    return next((c / "libcudadevrt.a" for c in candidates if (c / "libcudadevrt.a").is_file()), None)


def _load_linked(keyed: str, extra: tuple[str, ...], arch: str, cooperative: bool):
    """Relocatable CUBIN by NVRTC, linked with libcudadevrt.a by the driver (cached on disk as the linked CUBIN)."""
    from cupy.cuda import driver, nvrtc

    devrt = cudadevrt_path()
    if devrt is None:
        raise CompileError("device-side graph launches need libcudadevrt.a (the CUDA device runtime): install the "
                           "`gpu` extra (nvidia-cuda-runtime) or a CUDA toolkit and set CUDA_PATH")
    opts = (*extra, "-ftz=true", "-rdc=true")
    key = hashlib.sha256("\0".join((keyed, *options(opts), arch, str(nvrtc.getVersion()), "linked", str(devrt),
                                    str(devrt.stat().st_size))).encode()).hexdigest()

    def build() -> bytes:
        relocatable = cubin(keyed, arch, opts, name="ark_kernel.cu")
        state = driver.linkCreate()
        try:
            driver.linkAddData(state, driver.CU_JIT_INPUT_CUBIN, relocatable, "ark_kernel.cubin")
            driver.linkAddFile(state, driver.CU_JIT_INPUT_LIBRARY, str(devrt))
            return driver.linkComplete(state)
        except driver.CUDADriverError as exc:
            raise CompileError(f"linking the kernel with {devrt} failed: {exc}") from exc
        finally:
            driver.linkDestroy(state)

    return _cached_module(f"{key[:32]}.linked.cubin", build, cooperative)


def load(source: str, extra: tuple[str, ...] = (), cooperative: bool = False, rdc: bool = False):
    """A cupy.RawModule for the current GPU, compiled once per (source, headers, options). `cooperative`:
    its kernels launch with cuLaunchCooperativeKernel (every CTA resident at once, or the launch fails). `rdc`:
    relocatable device code linked with the device runtime (device-side cudaGraphLaunch)."""
    import cupy

    keyed = _keyed(source)
    opts = options(extra)
    device = cupy.cuda.Device()
    arch = arch_specific(source, device.compute_capability)
    key = hashlib.sha256("\0".join((keyed, *opts, str(cooperative), str(device.id), str(arch),
                                    str(rdc))).encode()).hexdigest()
    module = _modules.get(key)
    if module is None:
        if rdc:
            module = _load_linked(keyed, extra, arch or f"sm_{device.compute_capability}", cooperative)
        elif arch is not None:
            module = _load_arch_specific(keyed, extra, arch, cooperative)
        else:
            module = cupy.RawModule(code=keyed, options=opts, enable_cooperative_groups=cooperative)
            try:
                module.compile()
            except cupy.cuda.compiler.CompileException as exc:
                raise CompileError(str(exc)) from exc
        _modules[key] = module
    return module


def kernel(source: str, name: str, extra: tuple[str, ...] = ()):
    """One function of a module compiled by load()."""
    return load(source, extra).get_function(name)
