"""``python -m bench [--quick] [...]``: run every benchmark and print its tables.

Arguments are passed through to each benchmark's ``main(args)``, in the order of BENCHES (each
when it exists): the engine benchmark (bench.engine) first, the flows benchmark (bench.flows)
last.
"""

from __future__ import annotations

import contextlib
import importlib
import sys
import time
from types import ModuleType

BENCHES = ("engine", "bulk", "worker", "web", "flows")


def _load(name: str) -> ModuleType | None:
    try:
        return importlib.import_module(f"bench.{name}")
    except ModuleNotFoundError as exc:
        if exc.name != f"bench.{name}":
            raise
        return None


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if "-h" in args or "--help" in args:
        print(__doc__)
        for name in BENCHES:
            module = _load(name)
            if module is not None:
                print(f"\n--- bench.{name} ---")
                with contextlib.suppress(SystemExit):
                    module.main(["--help"])
        return 0
    status = 0
    for name in BENCHES:
        module = _load(name)
        if module is None:
            print(f"\n=== bench.{name}: not present, skipped ===", flush=True)
            continue
        print(f"\n=== bench.{name} {' '.join(args)} ===", flush=True)
        started = time.monotonic()
        try:
            code = module.main(args)
        except SystemExit as exc:  # argparse rejects an option another bench owns
            code = exc.code if isinstance(exc.code, int) else 1
        took = time.monotonic() - started
        print(f"=== bench.{name} done in {took:.0f} s (exit {code or 0}) ===", flush=True)
        status = status or int(code or 0)
    return status


if __name__ == "__main__":
    sys.exit(main())
