"""Every path the docs, the READMEs under bench/ and the runtime's comments name exists in the tree, so a moved
result or script cannot leave a dangling reference; bench/results/ holds results only (scripts and patches live in
bench/experiments/), and each experiment's scripts and results name each other."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT_SUFFIXES = {".patch", ".diff", ".py", ".sh"}

# A path from the checkout's root: bench/... or docs/..., not part of a longer path or word.
ROOTED = re.compile(r"(?<![\w./-])((?:bench|docs)/[\w.*/-]*)")
# A path relative to the document: ../x (./x in the docs is a command run from the checkout's root: ./dev).
RELATIVE = re.compile(r"(?<![\w./-])(\.\./[\w.*/-]*)")
# A markdown link's target, relative to the document unless it is a URL or an anchor.
LINK = re.compile(r"\]\(([^()\s#]+)(?:#[^()\s]*)?\)")


def documents(root: Path = ROOT) -> list[Path]:
    """The files whose path references are checked: the docs, the top README, every markdown file under bench/,
    and the runtime's sources (comments there name result folders)."""
    found = [root / "README.md", *sorted((root / "docs").glob("*.md")), *sorted((root / "bench").rglob("*.md"))]
    for pattern in ("*.py", "*.cuh", "*.cu"):
        found += sorted((root / "ark_runtime").rglob(pattern))
    return found


def _exists(path: Path) -> bool:
    """Whether the path exists; one with a wildcard must match at least one file."""
    parts = path.parts
    wild = next((i for i, part in enumerate(parts) if "*" in part), None)
    if wild is None:
        return path.exists()
    return any(Path(*parts[:wild]).glob("/".join(parts[wild:])))


def dangling(doc: Path, root: Path = ROOT) -> list[str]:
    """The references in `doc` to paths that do not exist, each as 'line N: reference'."""
    missing = []
    for n, line in enumerate(doc.read_text(encoding="utf-8").splitlines(), 1):
        refs = [(m, root) for m in ROOTED.findall(line)]
        refs += [(m, doc.parent) for m in RELATIVE.findall(line)]
        if doc.suffix == ".md":
            refs += [(m, doc.parent) for m in LINK.findall(line) if "://" not in m and not m.startswith("mailto:")]
        for ref, base in dict.fromkeys(refs):  # a link's target is often a ../ path too: once
            ref = ref.rstrip(".")  # a sentence's full stop
            if ref and not _exists((base / ref).resolve()):
                missing.append(f"line {n}: {ref}")
    return missing


def test_the_checked_documents_include_the_ones_that_name_results():
    names = {p.relative_to(ROOT).as_posix() for p in documents()}
    assert {"README.md", "docs/runtime.md", "docs/hardware-engine.md", "bench/experiments/README.md",
            "bench/results/h200/README.md", "ark_runtime/tiling.py"} <= names


@pytest.mark.parametrize("doc", documents(), ids=lambda p: p.relative_to(ROOT).as_posix())
def test_every_path_a_document_names_exists(doc):
    missing = dangling(doc)
    assert not missing, (f"{doc.relative_to(ROOT)} names paths that are not in the tree (moved or renamed? update "
                         f"the reference): " + "; ".join(missing))


def test_the_check_finds_planted_dangling_references(tmp_path):
    (tmp_path / "bench/results/h100/run").mkdir(parents=True)
    (tmp_path / "bench/results/h100/run/loop.json").write_text("{}")
    (tmp_path / "bench/results/h100/run/a_1.json").write_text("{}")
    doc = tmp_path / "bench/results/h100/run/README.md"
    doc.write_text("Files: `bench/results/h100/run/loop.json`, `../run/a_*.json`, [here](loop.json).\n"
                   "Gone: `bench/results/h100/old/loop.json`, see `../old/`\n"
                   "and [the script](../../../experiments/run/ab.py), `docs/none.md`,\n"
                   "`bench/results/h100/run/b_*.json`.\n")
    assert dangling(doc, tmp_path) == [
        "line 2: bench/results/h100/old/loop.json", "line 2: ../old/",
        "line 3: docs/none.md", "line 3: ../../../experiments/run/ab.py", "line 4: bench/results/h100/run/b_*.json"]


def test_bench_results_hold_no_scripts_or_patches():
    scripts = sorted(p.relative_to(ROOT).as_posix() for p in (ROOT / "bench/results").rglob("*")
                     if p.is_file() and p.suffix in SCRIPT_SUFFIXES)
    assert not scripts, ("bench/results/ holds results only; move these to bench/experiments/<name>/ "
                         f"(git mv) and link them from the results' README: {scripts}")


EXPERIMENTS = sorted(p for p in (ROOT / "bench/experiments").iterdir() if p.is_dir())


def test_there_are_experiments_to_check():
    assert len(EXPERIMENTS) >= 20


@pytest.mark.parametrize("folder", EXPERIMENTS, ids=lambda p: p.name)
def test_an_experiments_scripts_and_results_name_each_other(folder):
    readme = folder / "README.md"
    assert readme.is_file(), f"{folder.relative_to(ROOT)} has no README.md (its question, results)"
    named = ROOTED.findall(readme.read_text(encoding="utf-8"))
    results = [m.rstrip(".") for m in named if m.startswith("bench/results/")]
    assert results, f"{readme.relative_to(ROOT)} names no results folder under bench/results/"
    back = f"bench/experiments/{folder.name}/"
    for r in results:
        target = ROOT / r
        notes = target / "README.md" if target.is_dir() else target.parent / "README.md"
        assert notes.is_file() and back in notes.read_text(encoding="utf-8"), (
            f"{notes.relative_to(ROOT)} should name the experiment's scripts, {back}")
    index = (ROOT / "bench/experiments/README.md").read_text(encoding="utf-8")
    assert f"]({folder.name}/)" in index, f"bench/experiments/README.md has no row linking {folder.name}/"
