"""``python manage.py rsched_worker [rsched-worker flags]``: the worker of this project.

It becomes ``rsched-worker --django <this settings module>`` (the same process, replaced), so
signals, exit statuses and flags are that command's: ``--queues``, ``--concurrency``,
``--metrics-port``, ... (docs/cli.md).
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any, NoReturn

from django.conf import settings
from django.core.management.base import BaseCommand

#: manage.py's own options, already applied when the command runs (settings are loaded).
_MANAGE_OPTIONS = ("--settings", "--pythonpath")


class Command(BaseCommand):  # type: ignore[misc]  # Django ships no annotations
    help = "Run the rsched worker of this project's tasks (rsched-worker --django SETTINGS)."

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument(
            "args", nargs=argparse.REMAINDER, help="flags of rsched-worker (--queues, ...)"
        )

    def run_from_argv(self, argv: list[str]) -> NoReturn:
        # rsched-worker parses its own flags: Django's parser would refuse them.
        flags: list[str] = []
        rest = iter(argv[2:])
        for arg in rest:
            if arg in _MANAGE_OPTIONS:
                next(rest, None)
            elif not arg.startswith(tuple(f"{o}=" for o in _MANAGE_OPTIONS)):
                flags.append(arg)
        self.handle(*flags)

    def handle(self, *args: Any, **options: Any) -> NoReturn:
        command = [sys.executable, "-m", "rsched._cli.worker_process"]
        sys.stdout.flush()
        sys.stderr.flush()
        os.execv(sys.executable, [*command, "--django", settings.SETTINGS_MODULE, *args])
