"""Where the repository's files are, for tests that read the docs or start child processes."""

from __future__ import annotations

from pathlib import Path

#: The repository. On a child process's PYTHONPATH it makes ``tests.support.worker_app``
#: importable, which is how the tests name the worker apps they start.
ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
