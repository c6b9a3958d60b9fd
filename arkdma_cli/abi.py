"""`arkdma abi generate|check`: keep the generated header and tables in step with driver/abi.py."""

from __future__ import annotations

from driver import abi_codegen


def register(sub) -> None:
    p = sub.add_parser("abi", help="regenerate or check the files generated from the ABI definition")
    p.add_argument("action", choices=("generate", "check"))
    p.set_defaults(func=run)


def run(args) -> int:
    if args.action == "generate":
        changed = abi_codegen.write_all()
        print("\n".join(f"wrote {c}" for c in changed) or "all generated files are up to date")
        return 0
    stale = abi_codegen.stale_files()
    for s in stale:
        print(f"stale: {s} (run `arkdma abi generate`)")
    return 1 if stale else 0
