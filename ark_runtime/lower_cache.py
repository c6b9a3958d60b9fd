"""Lowered models kept on disk by content, so a second Runtime (or `arkdma plan`) of the same model starts without
planning again. The key is a digest of everything lowering reads: the model, the device, the options, every ARK_*
switch in the environment, and the runtime's own sources (its Python, CUDA templates and measured tables), so a
change to any of them misses the cache. $ARK_LOWER_CACHE names the folder ("0"/"off": no cache); else
$XDG_CACHE_HOME/arkdma/lowered (~/.cache/arkdma/lowered)."""

from __future__ import annotations

import functools
import hashlib
import json
import os
import pickle
import tempfile
from pathlib import Path

from ark_runtime.tiling import OFF

ENV = "ARK_LOWER_CACHE"
ROOT = Path(__file__).resolve().parent
FORMAT = 2  # 2: Lowered holds the program arrays


def folder() -> Path | None:
    where = os.environ.get(ENV, "").strip()
    if where.lower() in OFF:
        return None
    if where:
        return Path(where)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "arkdma" / "lowered"


@functools.cache
def sources_digest() -> str:
    """Of the files lowering's result depends on: the runtime's Python, templates and tables."""
    h = hashlib.sha256()
    for path in sorted(p for p in ROOT.rglob("*") if p.suffix in (".py", ".cuh", ".h", ".json") and p.is_file()):
        h.update(str(path.relative_to(ROOT)).encode())
        h.update(path.read_bytes())
    return h.hexdigest()


def key(model, device, options) -> str:
    switches = sorted((k, v) for k, v in os.environ.items() if k.startswith("ARK_") and k != ENV)
    blob = json.dumps([FORMAT, sources_digest(), model.as_json(), device.as_json(), repr(options), switches],
                      sort_keys=True, default=str)
    return hashlib.sha256(blob.encode()).hexdigest()[:32]


def load(k: str):
    where = folder()
    if where is None:
        return None
    path = where / f"{k}.pkl"
    try:
        with path.open("rb") as f:
            stored_key, lowered = pickle.load(f)
    except (OSError, pickle.UnpicklingError, EOFError, ValueError, AttributeError, ImportError):
        return None
    return lowered if stored_key == k else None


def store(k: str, lowered) -> None:
    """Written to a temporary file and renamed, so a reader never sees half of one; a cache that cannot be written
    is skipped (the result is still returned)."""
    where = folder()
    if where is None:
        return
    try:
        where.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=where, suffix=".tmp")
        with os.fdopen(fd, "wb") as f:
            pickle.dump((k, lowered), f, protocol=pickle.HIGHEST_PROTOCOL)
        os.replace(tmp, where / f"{k}.pkl")
    except OSError:
        pass
